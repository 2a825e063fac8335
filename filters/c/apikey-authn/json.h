/* A small JSON parser (RFC 8259) for filter configs: the whole document
 * becomes a tree of `json_value`s in one allocation arena. No host calls, so
 * it builds for wasm32-wasi and for the host (the unit tests). */
#ifndef WASMGATE_JSON_H
#define WASMGATE_JSON_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    JSON_NULL,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
} json_type;

typedef struct json_value json_value;

struct json_value {
    json_type type;
    bool boolean;
    double number;
    /* JSON_STRING: the decoded UTF-8 text, NUL-terminated (len excludes it). */
    char *string;
    size_t len;
    /* JSON_ARRAY and JSON_OBJECT: `count` items; objects also have `keys`. */
    json_value *items;
    char **keys;
    size_t count;
};

/* Parses `text[0..len]`. Returns the root, or NULL with a message in `error`
 * (which names the byte offset). Free the tree with json_free. */
json_value *json_parse(const char *text, size_t len, char *error, size_t error_len);
void json_free(json_value *value);

/* The member `key` of an object, or NULL (also when `object` is not one). */
const json_value *json_get(const json_value *object, const char *key);
const char *json_type_name(json_type type);

#endif
