"""The daemon's API as the bench scripts' Python parts use it (`sys.path` gets `benches/`).

Api("http://127.0.0.1:PORT/api", token).call(method, path, body) answers the JSON response;
Api.provision(slug, body) starts a run and polls its status until it ends, and returns it
(asserting provisioning_complete).
"""
import json
import time
import urllib.request


class Api:
    def __init__(self, base, token):
        self.base, self.token = base, token

    def call(self, method, path, body=None, kind="application/json"):
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        headers = {"Authorization": "Bearer " + self.token, "Host": "slipway.localhost",
                   "Content-Type": kind}
        request = urllib.request.Request(self.base + path, method=method, data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)

    def provision(self, slug, body, poll=0.05):
        started = self.call("POST", "/projects/%s/provision" % slug, dict(body, projectSlug=slug))
        while True:
            status = self.call("GET", "/provisioning/%s/status" % started["provisioningId"])
            if status["status"] != "provisioning_in_progress":
                break
            time.sleep(poll)
        assert status["status"] == "provisioning_complete", status
        return status
