/* {{name}}: an auditor (world auditor-filter), scaffolded by
 * `wasmgate new-filter`. As scaffolded it writes one JSON line per event to
 * its sink: choose what to record in `audit_event` below. The gateway hands
 * over the events in batches (`audit-batch`), in the order they happened.
 *
 * filters/build.sh generates auditor_filter.h with `wit-bindgen c`.
 * Ownership: the batch is ours to free; an error message must be heap
 * memory (auditor_filter_string_dup). Returning false with *err set is this
 * filter's own failure: logged and counted; audit never fails a request. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auditor_filter.h"

typedef auditor_filter_string_t wit_string;

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
    auditor_filter_string_free(&text);
    const char *first = copy;
    while (first && (*first == ' ' || *first == '\n' || *first == '\t' || *first == '\r')) first++;
    if (!first || *first != '{') {
        free(copy);
        return NULL;
    }
    return copy;
}

/* A growing text buffer. */
typedef struct {
    char *data;
    size_t len, cap;
} buffer;

static void put(buffer *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *data = realloc(b->data, cap);
        if (!data) abort();
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void put_str(buffer *b, const char *s) { put(b, s, strlen(s)); }

/* Appends `"key":"value"` with the value escaped as a JSON string. */
static void put_field(buffer *b, const char *key, const wit_string *value) {
    put_str(b, b->len > 1 ? ",\"" : "\"");
    put_str(b, key);
    put_str(b, "\":\"");
    for (size_t i = 0; i < value->len; i++) {
        unsigned char c = value->ptr[i];
        char escaped[8];
        if (c == '"' || c == '\\') {
            escaped[0] = '\\';
            escaped[1] = (char)c;
            put(b, escaped, 2);
        } else if (c < 0x20) {
            snprintf(escaped, sizeof escaped, "\\u%04x", c);
            put_str(b, escaped);
        } else {
            put(b, (const char *)&c, 1);
        }
    }
    put_str(b, "\"");
}

static const char *const STAGES[] = {"RequestReceived", "ResponseStarted", "ResponseComplete", "Panic"};

/* Writes one event's line; the event stays the caller's. */
static bool audit_event(const exports_wasmgate_filter_auditor_event_t *event, wit_string *err) {
    char *config = config_text();
    if (!config) {
        auditor_filter_string_dup(err, "{{name}}: bad config: not a JSON object");
        return false;
    }
    buffer record = {0};
    put_str(&record, "{");
    put_field(&record, "auditID", &event->audit_id);
    wit_string stage = {(uint8_t *)STAGES[event->stage & 3], strlen(STAGES[event->stage & 3])};
    put_field(&record, "stage", &stage);
    put_field(&record, "verb", &event->verb);
    put_field(&record, "requestURI", &event->request_uri);
    put_field(&record, "user", &event->user.name);
    char code[32] = "null";
    if (event->response_status.is_some) snprintf(code, sizeof code, "%u", event->response_status.val.code);
    put_str(&record, ",\"code\":");
    put_str(&record, code);
    put_str(&record, "}");

    /* Formatted only when the gateway's log keeps debug lines. */
    if (wasmgate_filter_host_log_enabled(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG)) {
        char message[256];
        snprintf(message, sizeof message, "event %.*s (config: %s)", (int)event->audit_id.len,
                 (const char *)event->audit_id.ptr, config);
        host_log(WASMGATE_FILTER_TYPES_LOG_LEVEL_DEBUG, message);
    }
    free(config);

    wit_string line = {(uint8_t *)record.data, record.len};
    wit_string write_error;
    bool written = wasmgate_filter_sink_write(&line, &write_error);
    free(record.data);
    if (!written) {
        *err = write_error; /* heap memory from the host call: handed on as ours */
        return false;
    }
    return true;
}

/* The batch stops at the first event that cannot be written: its error is the answer. */
bool exports_wasmgate_filter_auditor_audit_batch(exports_wasmgate_filter_auditor_list_event_t *events, wit_string *err) {
    bool written = true;
    for (size_t i = 0; written && i < events->len; i++) {
        written = audit_event(&events->ptr[i], err);
    }
    exports_wasmgate_filter_auditor_list_event_free(events);
    return written;
}
