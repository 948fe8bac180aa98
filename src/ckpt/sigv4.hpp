// ckpt/sigv4: AWS Signature Version 4 for S3 requests, written on OpenSSL (HMAC-SHA256, SHA-256) because
// Debian 12's curl 7.88 gets SigV4 wrong for multipart uploads. Pure functions, so they can be checked
// against AWS's published examples and botocore (tests/ckpt/sigv4_test.cpp).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tessera::ckpt::s3 {

std::string Sha256Hex(const void* data, size_t n);
std::string HmacSha256(const std::string& key, const std::string& msg);  // raw 32 bytes
std::string Hex(const std::string& raw);
// RFC 3986 percent-encoding as SigV4 wants it; '/' kept when encode_slash is false (object keys).
std::string UriEncode(const std::string& s, bool encode_slash);

struct SignInput {
  std::string method;                                      // "GET", "PUT", ...
  std::string path;                                        // URI path, already encoded ("/bucket/key")
  std::vector<std::pair<std::string, std::string>> query;  // raw (unencoded) names and values
  std::map<std::string, std::string> headers;              // lower-case names → values; must include "host"
  std::string payload_hash;                                // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
  std::string amz_date;                                    // "20130524T000000Z"
  std::string region;                                      // "us-east-1"
  std::string service = "s3";
  std::string access_key, secret_key;
};

struct SignOutput {
  std::string canonical_request, string_to_sign, signature, authorization, signed_headers;
};

SignOutput Sign(const SignInput& in);
// Canonical query string (sorted, encoded) — also what goes on the wire.
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);

}  // namespace tessera::ckpt::s3
