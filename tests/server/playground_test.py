#!/usr/bin/env python3
"""The playground (GET /) and the dashboard (GET /dashboard) of `kiln serve` in a real browser: Debian's
chromium, headless, driven by Playwright for Python (PyPI; its own browser download is not used).

SmolLM2-135M-Instruct (scripts/setup installs it; stories260K answers too fast to stop mid-stream) with its
own chat template, behind --api-key (the pages are open, their API calls carry the key typed into them): a chat round trip renders the streamed answer, equal to the same request made
through the API, with its figures line (tokens, TTFT, tokens/s); "prompt" shows the rendered chat from
/tokenize; stop ends a long answer mid-stream and the server frees its request; regenerate replaces the
last answer; the theme toggles; the dashboard's numbers move under `kiln bench serve` load; both pages work
behind a reverse proxy that serves kiln under /kiln/ (a small streaming proxy here). Screenshots go to
$KILN_ARTIFACTS (default: the test's temporary folder) as playground.png and dashboard.png.
Skips (exit 77; a failure under KILN_TEST_STRICT=1) without the test data, Playwright or chromium.
"""
import http.client
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import serve_test as st  # noqa: E402  (Server, raw, metric, skip_test, TMP)

try:
    from playwright.sync_api import sync_playwright
except ImportError:
    st.skip_test("playground_test: the playwright Python module is missing (pip install -r scripts/requirements.txt)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if not CHROMIUM:
    st.skip_test("playground_test: no chromium (scripts/setup installs Debian's)")
if not os.path.exists(st.SMOL):
    st.skip_test(f"playground_test: no SmolLM2 GGUF at {st.SMOL} (scripts/setup installs it)")

KEY = "play-key"
ARTIFACTS = os.environ.get("KILN_ARTIFACTS") or st.TMP


def start_proxy(backend_port, prefix="/kiln"):
    """A reverse proxy serving the server under `prefix` (streamed through, as nginx would)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the body ends when the connection closes: SSE passes through

        def forward(self):
            if not self.path.startswith(prefix + "/"):
                self.send_error(404)
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            conn = http.client.HTTPConnection("127.0.0.1", backend_port, timeout=120)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            conn.request(self.command, self.path[len(prefix):], body=body or None, headers=headers)
            r = conn.getresponse()
            self.send_response(r.status)
            for k, v in r.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length", "keep-alive"):
                    self.send_header(k, v)
            self.end_headers()
            try:
                while True:
                    chunk = r.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the browser went (stop): closing the backend connection tells kiln
            conn.close()

        do_GET = do_POST = forward

        def log_message(self, *args):
            pass

    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    return proxy


def main():
    srv = st.Server(st.SMOL, "--api-key", KEY)
    auth = {"Authorization": "Bearer " + KEY}
    proxy = start_proxy(srv.port)
    base = f"http://127.0.0.1:{proxy.server_address[1]}/kiln/"  # everything through the proxy's prefix
    try:
        status, page = st.raw("GET", "/", port=srv.port)
        st.check(status == 200 and "kiln playground" in str(page), f"GET / without a key: {status}")
        status, _ = st.raw("GET", "/dashboard", port=srv.port)
        st.check(status == 200, f"GET /dashboard: {status}")
        st.check(st.raw("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]},
                        port=srv.port)[0] == 401, "the API without the key: not 401")
        # What the page must show: the same request through the API (greedy).
        status, want = st.raw("POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "Once upon a time"}], "temperature": 0,
                               "max_tokens": 40}, auth, port=srv.port)
        st.check(status == 200, f"API chat: {status} {want}")
        want_text = want["choices"][0]["message"]["content"] if status == 200 else None
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(base)
            page.fill("#key", KEY)
            page.dispatch_event("#key", "change")
            page.wait_for_function("document.getElementById('model').textContent.includes('context')", timeout=10000)
            # A chat round trip, greedy.
            page.fill("#temperature", "0")
            page.fill("#max_tokens", "40")
            page.fill("#msg", "Once upon a time")
            page.click("#send")
            page.wait_for_selector(".meta", timeout=30000)
            got = page.inner_text(".msg.assistant")
            st.check(got == want_text, f"the playground's answer {got!r} != the API's {want_text!r}")
            figures = page.inner_text(".meta")
            st.check("tokens" in figures and "TTFT" in figures, f"figures line: {figures!r}")
            # The rendered prompt, from /tokenize.
            page.click("#show-prompt")
            page.wait_for_function("!document.getElementById('prompt-view').hidden", timeout=10000)
            shown = page.inner_text("#prompt-view")
            st.check("Once upon a time" in shown and "tokens)" in shown, f"rendered prompt: {shown!r}")
            page.click("#show-prompt")
            # Regenerate replaces the answer (greedy: the same text again, one answer on screen).
            page.click("#regen")
            page.wait_for_function("document.querySelectorAll('.meta').length == 1 && "
                                   "!document.getElementById('send').disabled", timeout=30000)
            st.check(page.locator(".msg.assistant").count() == 1, "regenerate left two answers")
            st.check(page.inner_text(".msg.assistant") == want_text, "regenerated answer differs (greedy)")
            # Stop mid-stream: a long answer, stopped once text arrives; the server frees it.
            page.fill("#max_tokens", "4000")
            page.check("#ignore_eos")
            page.fill("#msg", "Tell me a very long story.")
            page.click("#send")
            page.wait_for_function("document.querySelectorAll('.msg.assistant').length == 2 && "
                                   "document.querySelectorAll('.msg.assistant')[1].textContent.length > 0",
                                   timeout=30000)
            page.click("#stop")
            page.wait_for_function("document.querySelectorAll('.meta').length == 2", timeout=30000)
            st.check(page.inner_text(".meta >> nth=1").startswith("stopped"), "stop: no 'stopped' figures line")
            st.wait_idle(srv.port, "after stop")
            # Theme toggle.
            before = page.evaluate("document.documentElement.dataset.theme")
            page.click("#theme")
            st.check(page.evaluate("document.documentElement.dataset.theme") != before, "theme did not toggle")
            page.screenshot(path=os.path.join(ARTIFACTS, "playground.png"), full_page=True)
            # The dashboard under load: its generated-tokens count and output rate move.
            dash = browser.new_page(viewport={"width": 1200, "height": 800})
            dash.on("pageerror", lambda e: errors.append(str(e)))
            dash.goto(base + "dashboard")
            dash.wait_for_function("document.getElementById('v-gen').textContent !== '-'", timeout=10000)
            gen0 = float(dash.inner_text("#v-gen"))
            load = subprocess.Popen([st.KILN, "bench", "serve", "--url", f"http://127.0.0.1:{srv.port}",
                                     "--api-key", KEY, "--concurrency", "4", "--duration", "6", "--output-len", "200"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                dash.wait_for_function(f"parseFloat(document.getElementById('v-gen').textContent) > {gen0} && "
                                       "parseFloat(document.getElementById('v-tps').textContent) > 0 && "
                                       "parseFloat(document.getElementById('v-running').textContent) > 0",
                                       timeout=20000)
                time.sleep(3)  # a few points on the charts
                dash.screenshot(path=os.path.join(ARTIFACTS, "dashboard.png"), full_page=True)
            finally:
                st.check(load.wait(timeout=120) == 0, "kiln bench serve failed")
            st.check(float(dash.inner_text("#v-gen")) > gen0, "the dashboard's token count did not move")
            st.check(not errors, f"JavaScript errors: {errors}")
            browser.close()
    finally:
        proxy.shutdown()
        srv.stop()
    if st.FAILURES:
        print(f"playground_test: {len(st.FAILURES)} failure(s); logs and screenshots in {st.TMP}")
        return 1
    print(f"playground_test: ok (screenshots in {ARTIFACTS})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
