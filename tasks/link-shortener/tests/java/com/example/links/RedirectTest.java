package com.example.links;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.sun.net.httpserver.HttpServer;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class RedirectTest {
    private static HttpServer server;
    private static String base;
    private static final HttpClient HTTP = HttpClient.newBuilder()
            .followRedirects(HttpClient.Redirect.NEVER).build();

    @BeforeAll
    static void startApp() {
        server = App.start(0);
        base = "http://127.0.0.1:" + server.getAddress().getPort();
    }

    @AfterAll
    static void stopApp() {
        server.stop(0);
    }

    static HttpResponse<String> get(String path) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(URI.create(base + path)).GET().build(),
                HttpResponse.BodyHandlers.ofString());
    }

    static HttpResponse<String> post(String path, String body) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(URI.create(base + path))
                        .header("Content-Type", "application/json")
                        .POST(HttpRequest.BodyPublishers.ofString(body)).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    @Test
    void redirectsAndCountsHits() throws Exception {
        assertEquals(201, post("/api/links", "{\"url\": \"https://example.org/target\", \"code\": \"gogo\"}").statusCode());
        HttpResponse<String> first = get("/r/gogo");
        assertEquals(302, first.statusCode());
        assertEquals("https://example.org/target", first.headers().firstValue("Location").orElse(""));
        get("/r/gogo");
        HttpResponse<String> link = get("/api/links/gogo");
        assertEquals("2", LinksApiTest.field(link.body(), "hits"));
    }

    @Test
    void unknownCodeIs404() throws Exception {
        HttpResponse<String> r = get("/r/nope-nope");
        assertEquals(404, r.statusCode());
        assertEquals("not_found", LinksApiTest.field(r.body(), "code"));
    }

    @Test
    void unknownPathIs404() throws Exception {
        assertEquals(404, get("/api/nothing-here").statusCode());
    }
}
