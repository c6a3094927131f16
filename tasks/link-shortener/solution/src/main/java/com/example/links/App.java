package com.example.links;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Executors;
import java.util.regex.Pattern;

/** Reference solution of the link-shortener task: JDK only. */
public final class App {
    private static final Pattern CODE = Pattern.compile("^[A-Za-z0-9_-]{3,32}$");
    private static final String ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    private static final SecureRandom RANDOM = new SecureRandom();

    private static final class Link {
        final String code;
        final String url;
        int hits;

        Link(String code, String url) {
            this.code = code;
            this.url = url;
        }

        String json() {
            return "{\"code\": " + quote(code) + ", \"url\": " + quote(url) + ", \"hits\": " + hits + "}";
        }
    }

    /** HTTP method tests, named like the methods they accept. */
    private static final class Http {
        static boolean get(String method) {
            return method.equals("GET");
        }

        static boolean post(String method) {
            return method.equals("POST");
        }

        static boolean delete(String method) {
            return method.equals("DELETE");
        }
    }

    private final Map<String, Link> links = new TreeMap<>();

    private App() {
    }

    public static HttpServer start(int port) {
        try {
            HttpServer server = HttpServer.create(new InetSocketAddress("0.0.0.0", port), 0);
            App app = new App();
            server.createContext("/", app::handle);
            server.setExecutor(Executors.newFixedThreadPool(8));
            server.start();
            return server;
        } catch (IOException e) {
            throw new IllegalStateException("cannot listen on port " + port, e);
        }
    }

    public static void main(String[] args) {
        start(7080);
        System.out.println("Listening on 0.0.0.0:7080");
    }

    private void handle(HttpExchange ex) throws IOException {
        try {
            route(ex);
        } catch (RuntimeException e) {
            send(ex, 500, error("internal_error", "unexpected server fault"));
        } finally {
            ex.close();
        }
    }

    private void route(HttpExchange ex) throws IOException {
        String path = ex.getRequestURI().getPath();
        String method = ex.getRequestMethod();
        if (path.equals("/health")) {
            if (!Http.get(method)) {
                send(ex, 405, error("method_not_allowed", "use GET"));
                return;
            }
            send(ex, 200, "{\"status\": \"ok\"}");
        } else if (path.equals("/api/links")) {
            if (Http.get(method)) {
                list(ex);
            } else if (Http.post(method)) {
                create(ex);
            } else {
                send(ex, 405, error("method_not_allowed", "use GET or POST"));
            }
        } else if (path.startsWith("/api/links/") && path.indexOf('/', 11) < 0 && path.length() > 11) {
            String code = path.substring(11);
            if (Http.get(method)) {
                Link link;
                synchronized (links) {
                    link = links.get(code);
                    if (link != null) {
                        send(ex, 200, link.json());
                        return;
                    }
                }
                send(ex, 404, error("not_found", "no link " + code));
            } else if (Http.delete(method)) {
                boolean removed;
                synchronized (links) {
                    removed = links.remove(code) != null;
                }
                if (removed) {
                    ex.sendResponseHeaders(204, -1);
                } else {
                    send(ex, 404, error("not_found", "no link " + code));
                }
            } else {
                send(ex, 405, error("method_not_allowed", "use GET or DELETE"));
            }
        } else if (path.startsWith("/r/") && path.indexOf('/', 3) < 0 && path.length() > 3) {
            // GET /r/{code}: follow a link
            if (!Http.get(method)) {
                send(ex, 405, error("method_not_allowed", "use GET"));
                return;
            }
            String url = null;
            synchronized (links) {
                Link link = links.get(path.substring(3));
                if (link != null) {
                    link.hits++;
                    url = link.url;
                }
            }
            if (url == null) {
                send(ex, 404, error("not_found", "no link " + path.substring(3)));
                return;
            }
            ex.getResponseHeaders().set("Location", url);
            ex.sendResponseHeaders(302, -1);
        } else {
            send(ex, 404, error("not_found", "no endpoint " + path));
        }
    }

    private void list(HttpExchange ex) throws IOException {
        StringBuilder out = new StringBuilder("{\"links\": [");
        synchronized (links) {
            boolean first = true;
            for (Link link : links.values()) {
                out.append(first ? "" : ", ").append(link.json());
                first = false;
            }
        }
        send(ex, 200, out.append("]}").toString());
    }

    private void create(HttpExchange ex) throws IOException {
        Map<String, String> body;
        try (InputStream in = ex.getRequestBody()) {
            body = parseObject(new String(in.readAllBytes(), StandardCharsets.UTF_8));
        } catch (IllegalArgumentException e) {
            send(ex, 400, error("invalid_json", "body must be a JSON object with string values"));
            return;
        }
        String url = body.get("url");
        if (url == null || url.length() > 2048 || !(url.startsWith("http://") || url.startsWith("https://"))) {
            send(ex, 400, error("invalid_url", "url must start with http:// or https://"));
            return;
        }
        String code = body.get("code");
        if (code != null && !CODE.matcher(code).matches()) {
            send(ex, 400, error("invalid_code", "code must match ^[A-Za-z0-9_-]{3,32}$"));
            return;
        }
        Link link;
        synchronized (links) {
            if (code == null) {
                do {
                    StringBuilder sb = new StringBuilder();
                    for (int i = 0; i < 6; i++) {
                        sb.append(ALPHABET.charAt(RANDOM.nextInt(ALPHABET.length())));
                    }
                    code = sb.toString();
                } while (links.containsKey(code));
            } else if (links.containsKey(code)) {
                send(ex, 409, error("code_taken", "code " + code + " is taken"));
                return;
            }
            link = new Link(code, url);
            links.put(code, link);
        }
        send(ex, 201, link.json());
    }

    private static void send(HttpExchange ex, int status, String json) throws IOException {
        byte[] data = json.getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", "application/json");
        ex.sendResponseHeaders(status, data.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(data);
        }
    }

    private static String error(String code, String message) {
        return "{\"error\": " + quote(message) + ", \"code\": " + quote(code) + "}";
    }

    static String quote(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        return out.append('"').toString();
    }

    /** Parses a flat JSON object whose values are strings; IllegalArgumentException otherwise. */
    static Map<String, String> parseObject(String text) {
        int[] pos = {skip(text, 0)};
        Map<String, String> out = new LinkedHashMap<>();
        expect(text, pos, '{');
        pos[0] = skip(text, pos[0]);
        if (peek(text, pos) == '}') {
            pos[0]++;
        } else {
            while (true) {
                pos[0] = skip(text, pos[0]);
                String key = string(text, pos);
                pos[0] = skip(text, pos[0]);
                expect(text, pos, ':');
                pos[0] = skip(text, pos[0]);
                out.put(key, string(text, pos));
                pos[0] = skip(text, pos[0]);
                char c = peek(text, pos);
                pos[0]++;
                if (c == '}') {
                    break;
                }
                if (c != ',') {
                    throw new IllegalArgumentException("expected , or }");
                }
            }
        }
        if (skip(text, pos[0]) != text.length()) {
            throw new IllegalArgumentException("trailing data");
        }
        return out;
    }

    private static int skip(String s, int i) {
        while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
            i++;
        }
        return i;
    }

    private static char peek(String s, int[] pos) {
        if (pos[0] >= s.length()) {
            throw new IllegalArgumentException("unexpected end");
        }
        return s.charAt(pos[0]);
    }

    private static void expect(String s, int[] pos, char c) {
        if (peek(s, pos) != c) {
            throw new IllegalArgumentException("expected " + c);
        }
        pos[0]++;
    }

    private static String string(String s, int[] pos) {
        expect(s, pos, '"');
        StringBuilder out = new StringBuilder();
        while (true) {
            char c = peek(s, pos);
            pos[0]++;
            if (c == '"') {
                return out.toString();
            }
            if (c != '\\') {
                out.append(c);
                continue;
            }
            char e = peek(s, pos);
            pos[0]++;
            switch (e) {
                case '"': case '\\': case '/': out.append(e); break;
                case 'n': out.append('\n'); break;
                case 't': out.append('\t'); break;
                case 'r': out.append('\r'); break;
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'u':
                    if (pos[0] + 4 > s.length()) {
                        throw new IllegalArgumentException("bad escape");
                    }
                    out.append((char) Integer.parseInt(s.substring(pos[0], pos[0] + 4), 16));
                    pos[0] += 4;
                    break;
                default: throw new IllegalArgumentException("bad escape");
            }
        }
    }
}
