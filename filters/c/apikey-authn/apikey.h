/* The logic of apikey-authn, free of host calls: parse and check the config,
 * read the key from a header value, find the key's entry. Built for
 * wasm32-wasi (with filter.c) and for the host (with test_apikey.c). */
#ifndef WASMGATE_APIKEY_H
#define WASMGATE_APIKEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define APIKEY_DEFAULT_HEADER "x-api-key"

typedef struct {
    char *name;  /* a label for logs; "" when the config gives none */
    char *user;
    char *uid;   /* "" when the config gives none */
    char **groups;
    size_t group_count;
    uint8_t digest[32]; /* SHA-256 of the key */
} apikey_entry;

typedef struct {
    char *header; /* lower-case */
    char *scheme; /* "" for a bare key */
    apikey_entry *keys;
    size_t key_count;
} apikey_config;

/* Parses and checks the JSON config. Returns 0, or -1 with a message
 * starting "apikey-authn: bad config: " in `error`; `out` needs no freeing
 * then. */
int apikey_config_parse(const char *json, size_t len, apikey_config *out, char *error, size_t error_len);
void apikey_config_free(apikey_config *config);

/* The key a header value carries: the value without surrounding blanks, or,
 * when the config has a scheme, what follows "<scheme> " (the scheme in any
 * case). False when the value carries no key for this filter. */
bool apikey_from_header(const apikey_config *config, const char *value, size_t len, const char **key, size_t *key_len);

/* The entry of `key`: compares its SHA-256 with every entry's, always all of
 * them and each in constant time. NULL when no entry matches. */
const apikey_entry *apikey_lookup(const apikey_config *config, const char *key, size_t key_len);

#endif
