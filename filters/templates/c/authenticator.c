/* {{name}}: an authenticator (world authenticator-filter), scaffolded by
 * `wasmgate new-filter`. As scaffolded it has no opinion on any request:
 * recognise your credentials in the function below and answer
 * EXPORTS_WASMGATE_FILTER_AUTHENTICATOR_AUTHN_RESULT_AUTHENTICATED with a user.
 *
 * filters/build.sh generates authenticator_filter.h with `wit-bindgen c`.
 * Ownership: the request is ours to free; everything in the result must be
 * heap memory (authenticator_filter_string_dup), freed by the generated
 * post-return function once the host has read it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "authenticator_filter.h"

typedef authenticator_filter_string_t wit_string;

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
    authenticator_filter_string_free(&text);
    const char *first = copy;
    while (first && (*first == ' ' || *first == '\n' || *first == '\t' || *first == '\r')) first++;
    if (!first || *first != '{') {
        free(copy);
        return NULL;
    }
    return copy;
}

void exports_wasmgate_filter_authenticator_authenticate(exports_wasmgate_filter_authenticator_request_view_t *request,
                                                        exports_wasmgate_filter_authenticator_authn_result_t *ret) {
    char *config = config_text();
    if (!config) {
        /* This filter's error outcome: logged, never shown to the client. */
        ret->tag = EXPORTS_WASMGATE_FILTER_AUTHENTICATOR_AUTHN_RESULT_ERROR;
        authenticator_filter_string_dup(&ret->val.error, "{{name}}: bad config: not a JSON object");
    } else {
        /* Formatted only when the gateway's log keeps debug lines. method,
         * path, query and remote_addr are given (is_some) unless the
         * manifest's `reads` leaves them out (headers: its `headers`). */
        if (wasmgate_filter_host_log_enabled(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG)) {
            char message[512];
            wit_string none = {(uint8_t *)"-", 1};
            const wit_string *method = request->method.is_some ? &request->method.val : &none;
            const wit_string *path = request->path.is_some ? &request->path.val : &none;
            snprintf(message, sizeof message, "%.*s %.*s with %zu headers (config: %s)", (int)method->len,
                     (const char *)method->ptr, (int)path->len, (const char *)path->ptr, request->headers.len, config);
            host_log(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG, message);
        }
        free(config);
        ret->tag = EXPORTS_WASMGATE_FILTER_AUTHENTICATOR_AUTHN_RESULT_NO_OPINION;
    }
    exports_wasmgate_filter_authenticator_request_view_free(request);
}
