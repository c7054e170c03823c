"""Deploys a static site through a client generated from Slipway's OpenAPI document
(openapi-python-client): proves the document is usable by a real generator, not just valid.
Usage: client_deploy.py BASE_URL TOKEN (the generated package `slipway_client` on sys.path)."""

import io
import sys
import tarfile
import time

import httpx
from slipway_client import AuthenticatedClient
from slipway_client.api.default import (
    create_project,
    get_deployment,
    provision,
    provision_status,
    upload_source,
)
from slipway_client.models import CreateProject, ProvisionBody
from slipway_client.types import File

base_url, token = sys.argv[1], sys.argv[2]
client = AuthenticatedClient(
    base_url=base_url, token=token, headers={"Host": "slipway.localhost"}, timeout=30
)

project = create_project.sync(client=client, body=CreateProject(slug="generated"))
assert project.slug == "generated", project

archive = io.BytesIO()
with tarfile.open(fileobj=archive, mode="w:gz") as tar:
    page = b"<h1>deployed by a generated client</h1>"
    info = tarfile.TarInfo("index.html")
    info.size = len(page)
    tar.addfile(info, io.BytesIO(page))
uploaded = upload_source.sync(
    project_id="generated",
    client=client,
    body=File(payload=archive.getvalue(), file_name="site.tar.gz"),
)
assert uploaded.source_id.startswith("src_"), uploaded

accepted = provision.sync(
    project_id="generated",
    client=client,
    body=ProvisionBody(project_slug="generated"),
    idempotency_key="generated-client-deploy-1",
)
run_id = accepted.provisioning_id
for _ in range(300):
    status = provision_status.sync(provisioning_id=run_id, client=client)
    state = status.to_dict()["status"]
    if state != "provisioning_in_progress":
        break
    time.sleep(0.1)
assert state == "provisioning_complete", status.to_dict()

deployment = get_deployment.sync(deployment_id=accepted.deployment_id, client=client)
assert deployment.live, deployment
site = httpx.get(base_url + "/", headers={"Host": "generated.localhost"})
assert site.status_code == 200 and b"generated client" in site.content, site
print("generated client deployed", deployment.url)
