#!/usr/bin/env bash
# Regenerates the TLS test certificates in this directory:
#
#   ca.pem, ca.key          self-signed test CA
#   server.pem, server.key  server certificate signed by ca.pem,
#                           subjectAltName DNS:localhost, IP:127.0.0.1
#   other_ca.pem            a second, unrelated CA (its key is discarded): a
#                           client trusting it must be refused by a server
#                           presenting server.pem
#
# RSA 2048 keys. Every certificate is valid from 2000-01-01 (so that a machine
# whose clock is behind still accepts it) until 100 years after the day it was
# made (so that tests never see it expire).
# For tests only: the private keys are public in the repository.
#
# Usage: tests/testdata/tls/regenerate.sh   (from any directory; OpenSSL >= 3.0, GNU date)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
readonly not_before=20000101000000Z
not_after="$(date -u -d '+36500 days' +%Y%m%d%H%M%SZ)"
readonly not_after

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# A private OpenSSL config, so the result does not depend on the system's
# openssl.cnf. `openssl ca` is used for signing because it is the command
# that accepts an explicit notBefore.
cat > "$tmp/openssl.cnf" <<CNF
[req]
distinguished_name = dn
prompt = no

[dn]

[ca]
default_ca = test_ca

[test_ca]
database = $tmp/index.txt
new_certs_dir = $tmp
serial = $tmp/serial
default_md = sha256
policy = any_policy
unique_subject = no
email_in_dn = no
copy_extensions = none

[any_policy]
organizationName = optional
commonName = supplied

[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
CNF

newkey() { openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1"; }

# csr KEY SUBJECT OUT: a certificate request.
csr() { openssl req -new -config "$tmp/openssl.cnf" -key "$1" -subj "$2" -out "$3"; }

# sign CSR OUT EXTENSIONS [ca options...]: issue a certificate.
sign() {
  local in="$1" out="$2" ext="$3"
  shift 3
  : > "$tmp/index.txt"
  openssl ca -batch -notext -config "$tmp/openssl.cnf" -rand_serial \
    -startdate "$not_before" -enddate "$not_after" -extensions "$ext" \
    -in "$in" -out "$out" "$@" 2>"$tmp/ca.log" || { cat "$tmp/ca.log" >&2; return 1; }
}

# Self-signed CA.
newkey ca.key
csr ca.key "/O=Causeway tests/CN=Causeway Test CA" "$tmp/ca.csr"
sign "$tmp/ca.csr" ca.pem ca_ext -selfsign -keyfile ca.key

# Server key and certificate signed by the CA.
newkey server.key
csr server.key "/O=Causeway tests/CN=localhost" "$tmp/server.csr"
sign "$tmp/server.csr" server.pem server_ext -cert ca.pem -keyfile ca.key

# An unrelated CA; only its certificate is kept.
newkey "$tmp/other_ca.key"
csr "$tmp/other_ca.key" "/O=Causeway tests/CN=Causeway Other Test CA" "$tmp/other_ca.csr"
sign "$tmp/other_ca.csr" other_ca.pem ca_ext -selfsign -keyfile "$tmp/other_ca.key"

# Readable by whoever runs the tests.
chmod 0644 ca.pem ca.key server.pem server.key other_ca.pem

openssl verify -CAfile ca.pem server.pem
if openssl verify -CAfile other_ca.pem server.pem >/dev/null 2>&1; then
  echo "server.pem must not verify against other_ca.pem" >&2
  exit 1
fi
