/* SHA-256 (FIPS 180-4), for comparing API keys by digest. */
#ifndef WASMGATE_SHA256_H
#define WASMGATE_SHA256_H

#include <stddef.h>
#include <stdint.h>

void sha256(const void *data, size_t len, uint8_t digest[32]);

#endif
