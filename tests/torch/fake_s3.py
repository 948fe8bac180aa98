"""tests/torch/fake_s3.py — a small S3-compatible server for the checkpoint tests where no S3 server can be
installed (a GPU machine has no node for s3rver): path-style buckets, objects in memory, the calls
Tessera's S3 client makes (src/ckpt/s3.cpp): create bucket, PUT / GET (with Range) / HEAD / DELETE of an
object, ListObjectsV2 with a prefix, and multipart upload (initiate, upload part, complete, abort).
Authentication is not checked (the client signs; the server trusts loopback). Not a general S3 server.

    srv = FakeS3()                  # listens on 127.0.0.1, a free port, in a thread
    os.environ["TESSERA_S3_ENDPOINT"] = srv.endpoint
    ...
    srv.stop()

`python3 tests/torch/fake_s3.py PORT` serves in the foreground (for trying it with `tessera ckpt`).
"""
import re
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.buckets = {}  # name -> {key: bytes}
        self.uploads = {}  # upload id -> (bucket, key, {part number: bytes})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue for curl's large PUTs
    state = None  # set by FakeS3

    def log_message(self, *args):  # quiet
        pass

    def _split(self):
        u = urlsplit(self.path)
        parts = unquote(u.path).lstrip("/").split("/", 1)
        query = {k: v[0] for k, v in parse_qs(u.query, keep_blank_values=True).items()}
        return parts[0], (parts[1] if len(parts) > 1 else ""), query

    def _reply(self, code, body=b"", headers=None):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _error(self, code, what, resource):
        body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{what}</Code>"
                f"<Resource>{escape(resource)}</Resource></Error>").encode()
        self._reply(code, body, {"Content-Type": "application/xml"})

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_PUT(self):
        bucket, key, q = self._split()
        data = self._body()
        with self.state.lock:
            if not key:
                self.state.buckets.setdefault(bucket, {})
                return self._reply(200)
            if bucket not in self.state.buckets:
                return self._error(404, "NoSuchBucket", bucket)
            if "uploadId" in q:
                up = self.state.uploads.get(q["uploadId"])
                if up is None:
                    return self._error(404, "NoSuchUpload", key)
                up[2][int(q["partNumber"])] = data
            else:
                self.state.buckets[bucket][key] = data
        self._reply(200, headers={"ETag": f"\"{uuid.uuid4().hex}\""})

    def do_POST(self):
        bucket, key, q = self._split()
        self._body()
        with self.state.lock:
            if "uploads" in q:
                uid = uuid.uuid4().hex
                self.state.uploads[uid] = (bucket, key, {})
                body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><InitiateMultipartUploadResult>"
                        f"<Bucket>{escape(bucket)}</Bucket><Key>{escape(key)}</Key><UploadId>{uid}</UploadId>"
                        f"</InitiateMultipartUploadResult>").encode()
                return self._reply(200, body, {"Content-Type": "application/xml"})
            up = self.state.uploads.pop(q.get("uploadId", ""), None)
            if up is None:
                return self._error(404, "NoSuchUpload", key)
            parts = up[2]
            self.state.buckets.setdefault(bucket, {})[key] = b"".join(parts[i] for i in sorted(parts))
        body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><CompleteMultipartUploadResult>"
                f"<Key>{escape(key)}</Key></CompleteMultipartUploadResult>").encode()
        self._reply(200, body, {"Content-Type": "application/xml"})

    def do_DELETE(self):
        bucket, key, q = self._split()
        with self.state.lock:
            if "uploadId" in q:
                self.state.uploads.pop(q["uploadId"], None)
            else:
                self.state.buckets.get(bucket, {}).pop(key, None)
        self._reply(204)

    def _object(self):
        bucket, key, q = self._split()
        with self.state.lock:
            objs = self.state.buckets.get(bucket)
            if objs is None:
                return bucket, key, q, None, True
            return bucket, key, q, objs.get(key), False

    def do_HEAD(self):
        bucket, key, _, data, no_bucket = self._object()
        if data is None:
            return self._reply(404)
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()

    def do_GET(self):
        bucket, key, q, data, no_bucket = self._object()
        if no_bucket:
            return self._error(404, "NoSuchBucket", bucket)
        if not key:  # ListObjectsV2 (one page: the tests' buckets are small)
            prefix = q.get("prefix", "")
            with self.state.lock:
                items = sorted((k, len(v)) for k, v in self.state.buckets[bucket].items() if k.startswith(prefix))
            contents = "".join(f"<Contents><Key>{escape(k)}</Key><Size>{n}</Size></Contents>" for k, n in items)
            body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>{escape(bucket)}</Name>"
                    f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(items)}</KeyCount>"
                    f"<IsTruncated>false</IsTruncated>{contents}</ListBucketResult>").encode()
            return self._reply(200, body, {"Content-Type": "application/xml"})
        if data is None:
            return self._error(404, "NoSuchKey", key)
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        if m:
            a = int(m.group(1))
            b = min(int(m.group(2)) if m.group(2) else len(data) - 1, len(data) - 1)
            if a > b:
                return self._error(416, "InvalidRange", key)
            return self._reply(206, data[a:b + 1], {"Content-Range": f"bytes {a}-{b}/{len(data)}"})
        self._reply(200, data)


class FakeS3:
    def __init__(self, port=0):
        handler = type("Handler", (_Handler,), {"state": _State()})
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    srv = FakeS3(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(srv.endpoint, flush=True)
    try:
        srv.thread.join()
    except KeyboardInterrupt:
        srv.stop()
