/* apikey-authn: API keys in a request header (`X-Api-Key: <key>` by default,
 * or `Authorization: <scheme> <key>`), each mapped to a user, compared by
 * SHA-256 so the manifest need not hold the keys themselves.
 *
 * This file is the WIT glue (world authenticator-filter, bindings from
 * `wit-bindgen c`); the logic is in apikey.c, tested on the host by
 * test_apikey.c. Ownership follows wit-bindgen's C conventions: the request
 * is ours to free, and everything in the result must be heap memory, which
 * the generated post-return function frees after the host has read it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "apikey.h"
#include "authenticator_filter.h"

typedef authenticator_filter_string_t wit_string;

static void host_log(wasmgate_filter_host_log_level_t level, const char *message) {
    wit_string text = {(uint8_t *)message, strlen(message)};
    wasmgate_filter_host_log(level, &text);
}

/* The config never changes for a loaded filter; a pooled instance parses it
 * once and keeps it while the host hands the same text. */
static char *cached_text;
static size_t cached_len;
static apikey_config cached_config;

static const apikey_config *config(char *error, size_t error_len) {
    wit_string text;
    wasmgate_filter_host_config(&text);
    if (cached_text && cached_len == text.len && memcmp(cached_text, text.ptr, text.len) == 0) {
        authenticator_filter_string_free(&text);
        return &cached_config;
    }
    if (cached_text) {
        apikey_config_free(&cached_config);
        free(cached_text);
        cached_text = NULL;
    }
    apikey_config parsed;
    if (apikey_config_parse((const char *)text.ptr, text.len, &parsed, error, error_len) != 0) {
        authenticator_filter_string_free(&text);
        return NULL;
    }
    cached_config = parsed;
    cached_text = (char *)text.ptr; /* keep the bytes: ownership moves here */
    cached_len = text.len;
    return &cached_config;
}

static void set_string(wit_string *out, const char *s) {
    authenticator_filter_string_dup(out, s);
}

static void authenticated(const apikey_entry *entry, exports_wasmgate_filter_authenticator_authn_result_t *ret) {
    ret->tag = EXPORTS_WASMGATE_FILTER_AUTHENTICATOR_AUTHN_RESULT_AUTHENTICATED;
    exports_wasmgate_filter_authenticator_user_info_t *user = &ret->val.authenticated;
    memset(user, 0, sizeof *user);
    set_string(&user->name, entry->user);
    set_string(&user->uid, entry->uid);
    user->groups.len = entry->group_count;
    user->groups.ptr = calloc(entry->group_count ? entry->group_count : 1, sizeof *user->groups.ptr);
    for (size_t i = 0; i < entry->group_count; i++) set_string(&user->groups.ptr[i], entry->groups[i]);
    if (*entry->name) {
        /* Which key was used, for the audit log (kube keeps such facts in extra). */
        user->extra.len = 1;
        user->extra.ptr = calloc(1, sizeof *user->extra.ptr);
        set_string(&user->extra.ptr[0].key, "authentication.wasmgate.io/api-key-name");
        user->extra.ptr[0].values.len = 1;
        user->extra.ptr[0].values.ptr = calloc(1, sizeof(wit_string));
        set_string(&user->extra.ptr[0].values.ptr[0], entry->name);
    }
}

void exports_wasmgate_filter_authenticator_authenticate(exports_wasmgate_filter_authenticator_request_view_t *request,
                                                        exports_wasmgate_filter_authenticator_authn_result_t *ret) {
    char message[256];
    const apikey_config *cfg = config(message, sizeof message);
    if (!cfg) {
        host_log(WASMGATE_FILTER_TYPES_LOG_LEVEL_ERROR, message);
        ret->tag = EXPORTS_WASMGATE_FILTER_AUTHENTICATOR_AUTHN_RESULT_ERROR;
        set_string(&ret->val.error, message);
        exports_wasmgate_filter_authenticator_request_view_free(request);
        return;
    }
    /* The first header of that name, as kube reads Authorization. */
    const wasmgate_filter_types_header_t *header = NULL;
    for (size_t i = 0; i < request->headers.len && !header; i++) {
        const wit_string *name = &request->headers.ptr[i].name;
        if (name->len == strlen(cfg->header) && strncasecmp((const char *)name->ptr, cfg->header, name->len) == 0) {
            header = &request->headers.ptr[i];
        }
    }
    const char *key;
    size_t key_len;
    if (!header) {
        ret->tag = EXPORTS_WASMGATE_FILTER_AUTHENTICATOR_AUTHN_RESULT_NO_OPINION;
    } else if (!apikey_from_header(cfg, (const char *)header->value.ptr, header->value.len, &key, &key_len)) {
        if (wasmgate_filter_host_log_enabled(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG))
            host_log(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG, "the header carries no API key for this filter");
        ret->tag = EXPORTS_WASMGATE_FILTER_AUTHENTICATOR_AUTHN_RESULT_NO_OPINION;
    } else {
        const apikey_entry *entry = apikey_lookup(cfg, key, key_len);
        if (entry) {
            /* Formatted only when the gateway's log keeps debug lines. */
            if (wasmgate_filter_host_log_enabled(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG)) {
                snprintf(message, sizeof message, "API key %s%s%sbelongs to user \"%s\"", *entry->name ? "\"" : "",
                         entry->name, *entry->name ? "\" " : "", entry->user);
                host_log(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG, message);
            }
            authenticated(entry, ret);
        } else {
            /* A credential nobody accepts must never pass as anonymous: an
             * error makes the request a 401 unless another authenticator
             * recognises it (kube's rule for a rejected bearer token). */
            ret->tag = EXPORTS_WASMGATE_FILTER_AUTHENTICATOR_AUTHN_RESULT_ERROR;
            set_string(&ret->val.error, "apikey-authn: unknown API key");
        }
    }
    exports_wasmgate_filter_authenticator_request_view_free(request);
}
