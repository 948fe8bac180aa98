#!/usr/bin/python3
# tests/ckpt/sigv4_botocore: signs the requests given as JSON lines on stdin with botocore's S3SigV4Auth
# (Debian's python3-botocore) and prints one JSON line per request: canonical request and signature.
# Used by sigv4_test.cpp as an independent reference for our SigV4 code.
import json
import sys

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

for line in sys.stdin:
    c = json.loads(line)
    creds = Credentials(c["access_key"], c["secret_key"])
    auth = S3SigV4Auth(creds, "s3", c["region"])
    req = AWSRequest(method=c["method"], url=c["url"], data=c.get("body", "").encode())
    for k, v in c["headers"].items():
        req.headers[k] = v
    req.context["timestamp"] = c["amz_date"]
    canonical = auth.canonical_request(req)
    sts = auth.string_to_sign(req, canonical)
    print(json.dumps({"canonical_request": canonical, "signature": auth.signature(sts, req)}), flush=True)
