"""Headless Chromium for the browser tests (tests/test_docs.py: the docs site; tests/test_serve.py: the search page).

`Chromium` drives Debian's chromium over the DevTools protocol (websocket-client): navigation, console/exception/network
errors, DOM queries through `Runtime.evaluate`, typed input and screenshots. `need_chromium()` skips a test when
Chromium is missing, except in CI (CI set), where a missing Chromium is a failure (`make docs-deps` installs it).
"""
import base64, json, os, shutil, subprocess, tempfile, time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium")
                 if p and Path(p).exists()), None)


def need_chromium():
    "Skip without Chromium, unless CI is set (then fail)."
    if CHROMIUM: return
    if os.environ.get("CI"): pytest.fail("CI is set but Chromium is not installed (make docs-deps: apt-get install chromium)")
    pytest.skip("Chromium is not installed (apt-get install chromium); set CI=1 to make this a failure")


class Chromium:
    "Headless Chromium driven over the DevTools protocol: console/exception/network errors, DOM queries, screenshots."
    def __init__(self):
        import websocket
        self.tmp = tempfile.mkdtemp(prefix="lkt-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--hide-scrollbars", f"--user-data-dir={self.tmp}", "--remote-debugging-port=0",
             "--remote-allow-origins=*", "--window-size=1280,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file, t0 = Path(self.tmp) / "DevToolsActivePort", time.time()
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.time() - t0 > 120:
                self.close(); raise RuntimeError("Chromium did not start (no DevToolsActivePort)")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=60).read())
        ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(ws_url, timeout=120, suppress_origin=True)
        self.n, self.events = 0, []
        for m in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"): self.call(m)

    def call(self, method, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                if "error" in msg: raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def pump(self, seconds):
        "Collect events for `seconds`."
        end = time.time() + seconds
        self.ws.settimeout(0.2)
        while time.time() < end:
            try: self.events.append(json.loads(self.ws.recv()))
            except Exception: pass
        self.ws.settimeout(120)

    def goto(self, url, settle=2.0, timeout=120):
        self.events = []
        self.call("Page.navigate", url=url)
        end = time.time() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.time() > end: raise TimeoutError(f"{url} did not load in {timeout} s")
            self.pump(0.2)
        self.pump(settle)   # MathJax typesets and fonts load after the load event

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r: raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def errors(self):
        "JavaScript exceptions, console.error/assert calls, and error-level log entries (failed loads, CSP, …)."
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]; out.append(f"exception: {d.get('text')} {d.get('exception', {}).get('description', '')}")
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.error: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
            elif m == "Network.loadingFailed" and not p.get("canceled"):
                out.append(f"network: {p.get('errorText')} (request {p.get('requestId')})")
        return out

    def screenshot(self, full_page=False):
        params = {"format": "png"}
        if full_page:
            m = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": m["width"],
                                                            "height": min(m["height"], 6000), "scale": 1})
        return base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])

    def type_text(self, selector, text):
        "Focus the element matching `selector` and type `text` into it (DevTools Input.insertText, as a keyboard would)."
        self.eval(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", text=text)

    def wait_for(self, expr, timeout=60):
        "Pump events until the JavaScript expression `expr` is truthy; returns its value (TimeoutError after `timeout` s)."
        end = time.time() + timeout
        while time.time() < end:
            v = self.eval(expr)
            if v: return v
            self.pump(0.2)
        raise TimeoutError(f"{expr!r} still false after {timeout} s")

    def close(self):
        try: self.ws.close()
        except Exception: pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try: self.proc.wait(10)
            except subprocess.TimeoutExpired: self.proc.kill(); self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)
