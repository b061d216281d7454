"""Every ObjectStore runs the object-store suite (tests/conformance/suites/object_store.py): the local
directory, and the S3 backend against a real S3-compatible server (moto's, on 127.0.0.1; skipped
where moto or boto3 is not installed). The local-only test checks what only a directory shows: no
temporary file is left beside an object, and emptied folders go with their last object.
"""

from __future__ import annotations

import itertools
import os

import pytest

from citadel.config import CitadelConfig
from citadel.ingest.objects import LocalObjectStore, S3ObjectStore, make_object_store
from tests.conformance.suites.object_store import ObjectStoreConformance

BUCKET = "citadel-conformance"
_buckets = itertools.count()


class TestLocalObjectStore(ObjectStoreConformance):
    @pytest.fixture
    def backend(self, tmp_path):
        return LocalObjectStore(tmp_path / "objects")


@pytest.fixture(scope="module")
def s3_client():
    pytest.importorskip("boto3")
    server_module = pytest.importorskip("moto.server")
    import boto3

    for name, value in (("AWS_ACCESS_KEY_ID", "conformance"), ("AWS_SECRET_ACCESS_KEY", "conformance")):
        os.environ.setdefault(name, value)  # moto accepts any credentials; boto3 needs some
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1")
    finally:
        server.stop()


class TestS3ObjectStore(ObjectStoreConformance):
    @pytest.fixture
    def backend(self, s3_client):
        bucket = f"{BUCKET}-{next(_buckets)}"  # an empty bucket per test
        s3_client.create_bucket(Bucket=bucket)
        return S3ObjectStore(bucket, "tenants/", client=s3_client)


def test_the_local_store_leaves_no_temporary_files_and_no_empty_folders(tmp_path):
    store = LocalObjectStore(tmp_path / "objects")
    store.put_if_absent("raw/acme/memo/v1/a.md", b"a")
    store.put_if_absent("raw/acme/memo/v1/a.md", b"a")
    with pytest.raises(Exception):
        store.put_if_absent("raw/acme/memo/v1/a.md", b"b")
    assert [p.name for p in (tmp_path / "objects/raw/acme/memo/v1").iterdir()] == ["a.md"]
    store.delete("raw/acme/memo/v1/a.md")
    assert list((tmp_path / "objects").iterdir()) == []


def test_the_config_picks_the_backend(tmp_path, s3_client):
    local = make_object_store(CitadelConfig(home=tmp_path))
    assert isinstance(local, LocalObjectStore) and local.root == tmp_path / "objects"
    s3_client.create_bucket(Bucket="citadel-configured")
    configured = make_object_store(CitadelConfig(home=tmp_path, objects={
        "backend": "s3", "bucket": "citadel-configured", "prefix": "prod/", "region": "us-east-1",
        "endpoint_url": s3_client.meta.endpoint_url}))
    assert configured.put_if_absent("raw/acme/memo/v1/a.md", b"through the config") is True
    listed = s3_client.list_objects_v2(Bucket="citadel-configured")["Contents"]
    assert [item["Key"] for item in listed] == ["prod/raw/acme/memo/v1/a.md"]
