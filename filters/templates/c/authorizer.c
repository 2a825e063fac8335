/* {{name}}: an authorizer (world authorizer-filter), scaffolded by
 * `wasmgate new-filter`. As scaffolded it allows every request: put your
 * policy in the function below and answer
 * EXPORTS_WASMGATE_FILTER_AUTHORIZER_DECISION_DENY or _NO_OPINION (with a
 * reason) where it applies.
 *
 * filters/build.sh generates authorizer_filter.h with `wit-bindgen c`.
 * Ownership: the attributes are ours to free; everything in the result must
 * be heap memory (authorizer_filter_string_dup), freed by the generated
 * post-return function once the host has read it. Returning false with *err
 * set is this filter's own failure: the manifest's failure_policy decides. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "authorizer_filter.h"

typedef authorizer_filter_string_t wit_string;

static void host_log(wasmgate_filter_host_log_level_t level, const char *message) {
    wit_string text = {(uint8_t *)message, strlen(message)};
    wasmgate_filter_host_log(level, &text);
}

/* The manifest's `config` table as JSON text (NUL-terminated; free it), or
 * NULL when it is not a JSON object. To read its members, copy json.c and
 * json.h from filters/c/apikey-authn. */
static char *config_text(void) {
    wit_string text;
    wasmgate_filter_host_config(&text);
    char *copy = malloc(text.len + 1);
    if (copy) {
        memcpy(copy, text.ptr, text.len);
        copy[text.len] = '\0';
    }
    authorizer_filter_string_free(&text);
    const char *first = copy;
    while (first && (*first == ' ' || *first == '\n' || *first == '\t' || *first == '\r')) first++;
    if (!first || *first != '{') {
        free(copy);
        return NULL;
    }
    return copy;
}

bool exports_wasmgate_filter_authorizer_authorize(exports_wasmgate_filter_authorizer_attributes_t *attributes,
                                                  exports_wasmgate_filter_authorizer_decision_t *ret, wit_string *err) {
    char *config = config_text();
    if (!config) {
        authorizer_filter_string_dup(err, "{{name}}: bad config: not a JSON object");
        exports_wasmgate_filter_authorizer_attributes_free(attributes);
        return false;
    }
    /* Formatted only when the gateway's log keeps debug lines. */
    if (wasmgate_filter_host_log_enabled(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG)) {
        char message[512];
        const exports_wasmgate_filter_authorizer_request_info_t *request = &attributes->request;
        snprintf(message, sizeof message, "%.*s %.*s %.*s (config: %s)", (int)attributes->user.name.len,
                 (const char *)attributes->user.name.ptr, (int)request->verb.len, (const char *)request->verb.ptr,
                 (int)request->path.len, (const char *)request->path.ptr, config);
        host_log(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG, message);
    }
    free(config);
    ret->tag = EXPORTS_WASMGATE_FILTER_AUTHORIZER_DECISION_ALLOW;
    exports_wasmgate_filter_authorizer_attributes_free(attributes);
    return true;
}
