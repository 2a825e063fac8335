/* {{name}}: a json auditor (world json-auditor-filter), scaffolded by
 * `wasmgate new-filter`. The gateway hands over a batch of events already
 * serialised, as Kubernetes' log backend writes them
 * (--audit-log-format=json): `batch->lines` holds one audit.k8s.io/v1 Event
 * JSON object a line, each ending in '\n', and `batch->stages` each line's
 * stage, in order. As scaffolded it appends the lines to its sink as they
 * are, in one write-lines call: drop some by their stages, or forward them
 * elsewhere, in exports_wasmgate_filter_json_auditor_audit_json_lines.
 *
 * filters/build.sh generates json_auditor_filter.h with `wit-bindgen c`.
 * Ownership: the batch is ours to free; an error message must be heap
 * memory (json_auditor_filter_string_dup), which the generated post-return
 * function frees after the host has read it. Returning false with *err set
 * is this filter's own failure: logged and counted; audit never fails a
 * request. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_auditor_filter.h"

typedef json_auditor_filter_string_t wit_string;

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
    json_auditor_filter_string_free(&text);
    const char *first = copy;
    while (first && (*first == ' ' || *first == '\n' || *first == '\t' || *first == '\r')) first++;
    if (!first || *first != '{') {
        free(copy);
        return NULL;
    }
    return copy;
}

/* The batch's lines, in the order their events happened. */
bool exports_wasmgate_filter_json_auditor_audit_json_lines(exports_wasmgate_filter_json_auditor_json_batch_t *batch,
                                                           wit_string *err) {
    char *config = config_text();
    if (!config) {
        exports_wasmgate_filter_json_auditor_json_batch_free(batch);
        json_auditor_filter_string_dup(err, "{{name}}: bad config: not a JSON object");
        return false;
    }
    /* Formatted only when the gateway's log keeps debug lines. */
    if (wasmgate_filter_host_log_enabled(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG)) {
        char message[256];
        snprintf(message, sizeof message, "%zu lines (config: %s)", batch->stages.len, config);
        host_log(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG, message);
    }
    free(config);
    /* Whole lines, appended as they are; the sink's error is heap memory from
     * the host call, handed on as ours. */
    bool written = batch->lines.len == 0 || wasmgate_filter_sink_write_lines(&batch->lines, err);
    exports_wasmgate_filter_json_auditor_json_batch_free(batch);
    return written;
}
