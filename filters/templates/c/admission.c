/* {{name}}: an admission filter (world admission-filter), scaffolded by
 * `wasmgate new-filter`. As scaffolded it allows every object: check (or
 * change) request->object (JSON text) in the function below and answer
 * EXPORTS_WASMGATE_FILTER_ADMISSION_ADMISSION_RESPONSE_DENIED with a status,
 * or, listed under [[admission.mutating]], _MUTATED or _PATCHED with JSON.
 *
 * filters/build.sh generates admission_filter.h with `wit-bindgen c`.
 * Ownership: the request is ours to free; everything in the result must be
 * heap memory (admission_filter_string_dup), freed by the generated
 * post-return function once the host has read it. Returning false with *err
 * set is this filter's own failure: the manifest's failure_policy decides. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admission_filter.h"

typedef admission_filter_string_t wit_string;

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
    admission_filter_string_free(&text);
    const char *first = copy;
    while (first && (*first == ' ' || *first == '\n' || *first == '\t' || *first == '\r')) first++;
    if (!first || *first != '{') {
        free(copy);
        return NULL;
    }
    return copy;
}

static const char *const OPERATIONS[] = {"create", "update", "delete", "connect"};

bool exports_wasmgate_filter_admission_admit(exports_wasmgate_filter_admission_admission_request_t *request,
                                             exports_wasmgate_filter_admission_admission_response_t *ret,
                                             wit_string *err) {
    char *config = config_text();
    if (!config) {
        admission_filter_string_dup(err, "{{name}}: bad config: not a JSON object");
        exports_wasmgate_filter_admission_admission_request_free(request);
        return false;
    }
    /* Formatted only when the gateway's log keeps debug lines. request and
     * user are given (is_some) unless the manifest's `reads` leaves them out
     * (a filter that reads only the object is cheaper to call). */
    if (wasmgate_filter_host_log_enabled(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG)) {
        char message[512];
        size_t size = request->object.is_some ? request->object.val.len : 0;
        wit_string none = {(uint8_t *)"", 0};
        const wit_string *resource = request->request.is_some ? &request->request.val.resource : &none;
        const wit_string *user = request->user.is_some ? &request->user.val.name : &none;
        snprintf(message, sizeof message, "%s %.*s by %.*s: %zu bytes (config: %s)", OPERATIONS[request->operation & 3],
                 (int)resource->len, (const char *)resource->ptr, (int)user->len, (const char *)user->ptr, size, config);
        host_log(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG, message);
    }
    free(config);
    ret->tag = EXPORTS_WASMGATE_FILTER_ADMISSION_ADMISSION_RESPONSE_ALLOWED;
    exports_wasmgate_filter_admission_admission_request_free(request);
    return true;
}
