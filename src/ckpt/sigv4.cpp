// ckpt/sigv4: canonical request, string to sign, signing key derivation and signature (SigV4).
#include "ckpt/sigv4.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>

namespace tessera::ckpt::s3 {

std::string Hex(const std::string& raw) {
  static const char* d = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

std::string Sha256Hex(const void* data, size_t n) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  unsigned int len = 0;
  EVP_Digest(data, n, md, &len, EVP_sha256(), nullptr);
  return Hex(std::string(reinterpret_cast<char*>(md), len));
}

std::string HmacSha256(const std::string& key, const std::string& msg) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), md, &len);
  return std::string(reinterpret_cast<char*>(md), len);
}

std::string UriEncode(const std::string& s, bool encode_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (c == '/' && !encode_slash)) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  for (const auto& [k, v] : query) enc.push_back({UriEncode(k, true), UriEncode(v, true)});
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out.push_back('&');
    out += k + "=" + v;
  }
  return out;
}

namespace {
std::string Trim(const std::string& s) {
  // Trim and collapse sequential spaces, as SigV4 requires for header values.
  std::string out;
  bool space = false;
  for (char c : s) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}
}  // namespace

SignOutput Sign(const SignInput& in) {
  SignOutput out;
  std::string canon_headers;
  for (const auto& [k, v] : in.headers) {  // std::map: sorted by lower-case name
    canon_headers += k + ":" + Trim(v) + "\n";
    if (!out.signed_headers.empty()) out.signed_headers.push_back(';');
    out.signed_headers += k;
  }
  out.canonical_request = in.method + "\n" + (in.path.empty() ? "/" : in.path) + "\n" + CanonicalQuery(in.query) +
                          "\n" + canon_headers + "\n" + out.signed_headers + "\n" + in.payload_hash;
  std::string date = in.amz_date.substr(0, 8);
  std::string scope = date + "/" + in.region + "/" + in.service + "/aws4_request";
  out.string_to_sign = "AWS4-HMAC-SHA256\n" + in.amz_date + "\n" + scope + "\n" +
                       Sha256Hex(out.canonical_request.data(), out.canonical_request.size());
  std::string k = HmacSha256("AWS4" + in.secret_key, date);
  k = HmacSha256(k, in.region);
  k = HmacSha256(k, in.service);
  k = HmacSha256(k, "aws4_request");
  out.signature = Hex(HmacSha256(k, out.string_to_sign));
  out.authorization = "AWS4-HMAC-SHA256 Credential=" + in.access_key + "/" + scope +
                      ", SignedHeaders=" + out.signed_headers + ", Signature=" + out.signature;
  return out;
}

}  // namespace tessera::ckpt::s3
