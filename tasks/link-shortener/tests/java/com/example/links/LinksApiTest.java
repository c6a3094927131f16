package com.example.links;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

class LinksApiTest {
    private HttpServer server;
    private String base;
    private final HttpClient http = HttpClient.newBuilder()
            .followRedirects(HttpClient.Redirect.NEVER).build();

    @BeforeEach
    void startApp() {
        server = App.start(0);
        base = "http://127.0.0.1:" + server.getAddress().getPort();
    }

    @AfterEach
    void stopApp() {
        server.stop(0);
    }

    static String field(String json, String name) {
        Matcher m = Pattern.compile("\"" + name + "\"\\s*:\\s*(\"((?:[^\"\\\\]|\\\\.)*)\"|-?\\d+)").matcher(json);
        if (!m.find()) {
            return null;
        }
        return m.group(2) != null ? m.group(2) : m.group(1);
    }

    HttpResponse<String> send(String method, String path, String body) throws Exception {
        HttpRequest.Builder req = HttpRequest.newBuilder(URI.create(base + path));
        if (body == null) {
            req.method(method, HttpRequest.BodyPublishers.noBody());
        } else {
            req.header("Content-Type", "application/json")
               .method(method, HttpRequest.BodyPublishers.ofString(body));
        }
        return http.send(req.build(), HttpResponse.BodyHandlers.ofString());
    }

    @Test
    void healthAnswersOk() throws Exception {
        HttpResponse<String> r = send("GET", "/health", null);
        assertEquals(200, r.statusCode());
        assertEquals("ok", field(r.body(), "status"));
        assertTrue(r.headers().firstValue("Content-Type").orElse("").startsWith("application/json"));
    }

    @Test
    void createWithCodeThenRead() throws Exception {
        HttpResponse<String> r = send("POST", "/api/links", "{\"url\": \"https://example.org/a/b\", \"code\": \"docs\"}");
        assertEquals(201, r.statusCode());
        assertEquals("docs", field(r.body(), "code"));
        assertEquals("https://example.org/a/b", field(r.body(), "url"));
        assertEquals("0", field(r.body(), "hits"));
        HttpResponse<String> g = send("GET", "/api/links/docs", null);
        assertEquals(200, g.statusCode());
        assertEquals("https://example.org/a/b", field(g.body(), "url"));
    }

    @Test
    void generatedCodeHasSixCharacters() throws Exception {
        HttpResponse<String> r = send("POST", "/api/links", "{\"url\": \"http://example.com/x\"}");
        assertEquals(201, r.statusCode());
        String code = field(r.body(), "code");
        assertTrue(code != null && code.matches("[A-Za-z0-9]{6}"), "generated code: " + code);
        assertEquals(200, send("GET", "/api/links/" + code, null).statusCode());
    }

    @Test
    void rejectsBadInput() throws Exception {
        HttpResponse<String> bad = send("POST", "/api/links", "not json");
        assertEquals(400, bad.statusCode());
        assertEquals("invalid_json", field(bad.body(), "code"));
        HttpResponse<String> url = send("POST", "/api/links", "{\"url\": \"ftp://example.org\"}");
        assertEquals(400, url.statusCode());
        assertEquals("invalid_url", field(url.body(), "code"));
        HttpResponse<String> code = send("POST", "/api/links", "{\"url\": \"https://a.example\", \"code\": \"a b\"}");
        assertEquals(400, code.statusCode());
        assertEquals("invalid_code", field(code.body(), "code"));
    }

    @Test
    void duplicateCodeConflicts() throws Exception {
        assertEquals(201, send("POST", "/api/links", "{\"url\": \"https://a.example\", \"code\": \"dup\"}").statusCode());
        HttpResponse<String> again = send("POST", "/api/links", "{\"url\": \"https://b.example\", \"code\": \"dup\"}");
        assertEquals(409, again.statusCode());
        assertEquals("code_taken", field(again.body(), "code"));
    }

    @Test
    void listIsSortedByCode() throws Exception {
        send("POST", "/api/links", "{\"url\": \"https://z.example\", \"code\": \"zeta\"}");
        send("POST", "/api/links", "{\"url\": \"https://a.example\", \"code\": \"alpha\"}");
        HttpResponse<String> r = send("GET", "/api/links", null);
        assertEquals(200, r.statusCode());
        int alpha = r.body().indexOf("\"alpha\"");
        int zeta = r.body().indexOf("\"zeta\"");
        assertTrue(alpha >= 0 && zeta > alpha, r.body());
    }

    @Test
    void deleteFreesTheCode() throws Exception {
        send("POST", "/api/links", "{\"url\": \"https://a.example\", \"code\": \"gone\"}");
        assertEquals(204, send("DELETE", "/api/links/gone", null).statusCode());
        assertEquals(404, send("GET", "/api/links/gone", null).statusCode());
        assertEquals(404, send("DELETE", "/api/links/gone", null).statusCode());
        assertEquals(201, send("POST", "/api/links", "{\"url\": \"https://b.example\", \"code\": \"gone\"}").statusCode());
    }

    @Test
    void wrongMethodIs405() throws Exception {
        HttpResponse<String> r = send("PUT", "/api/links", "{}");
        assertEquals(405, r.statusCode());
        assertEquals("method_not_allowed", field(r.body(), "code"));
    }
}
