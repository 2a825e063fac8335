/* See json.h. Recursive descent, depth-limited, strict: no trailing commas,
 * no comments, no leading zeros, valid escapes and UTF-8 surrogate pairs. */
#include "json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct {
    const char *text;
    size_t len;
    size_t pos;
    char *error;
    size_t error_len;
    bool failed;
} parser;

static void fail(parser *p, const char *what) {
    if (!p->failed) {
        snprintf(p->error, p->error_len, "%s at byte %zu", what, p->pos);
        p->failed = true;
    }
}

static void skip_space(parser *p) {
    while (p->pos < p->len) {
        char c = p->text[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static bool literal(parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos >= n && memcmp(p->text + p->pos, word, n) == 0) {
        p->pos += n;
        return true;
    }
    return false;
}

static int hex4(parser *p) {
    if (p->len - p->pos < 4) return -1;
    int value = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->text[p->pos + i];
        int digit = (c >= '0' && c <= '9') ? c - '0'
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (digit < 0) return -1;
        value = value * 16 + digit;
    }
    p->pos += 4;
    return value;
}

static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

/* Parses a string starting at the opening quote; the decoded text is never
 * longer than the source, so one allocation of the source length suffices. */
static char *parse_string(parser *p, size_t *out_len) {
    p->pos++; /* the opening quote */
    size_t start = p->pos, end = start;
    while (end < p->len && p->text[end] != '"') end += (p->text[end] == '\\') ? 2 : 1;
    if (end >= p->len) { fail(p, "unterminated string"); return NULL; }
    char *out = malloc(end - start + 1);
    if (!out) { fail(p, "out of memory"); return NULL; }
    size_t n = 0;
    while (p->pos < end) {
        unsigned char c = (unsigned char)p->text[p->pos];
        if (c < 0x20) { fail(p, "control character in string"); free(out); return NULL; }
        if (c != '\\') { out[n++] = (char)c; p->pos++; continue; }
        p->pos++;
        char e = p->text[p->pos++];
        switch (e) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            int hi = hex4(p);
            if (hi < 0) { fail(p, "bad \\u escape"); free(out); return NULL; }
            uint32_t cp = (uint32_t)hi;
            if (hi >= 0xD800 && hi <= 0xDBFF) {
                int lo = -1;
                if (p->pos + 1 < end && p->text[p->pos] == '\\' && p->text[p->pos + 1] == 'u') {
                    p->pos += 2;
                    lo = hex4(p);
                }
                if (lo < 0xDC00 || lo > 0xDFFF) { fail(p, "unpaired surrogate"); free(out); return NULL; }
                cp = 0x10000 + (((uint32_t)hi - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
            } else if (hi >= 0xDC00 && hi <= 0xDFFF) {
                fail(p, "unpaired surrogate"); free(out); return NULL;
            }
            n += put_utf8(out + n, cp);
            break;
        }
        default:
            fail(p, "bad escape"); free(out); return NULL;
        }
    }
    p->pos = end + 1;
    out[n] = '\0';
    *out_len = n;
    return out;
}

static bool parse_number(parser *p, double *out) {
    size_t start = p->pos;
    if (p->pos < p->len && p->text[p->pos] == '-') p->pos++;
    if (p->pos >= p->len) { fail(p, "bad number"); return false; }
    if (p->text[p->pos] == '0') {
        p->pos++;
    } else if (p->text[p->pos] >= '1' && p->text[p->pos] <= '9') {
        while (p->pos < p->len && p->text[p->pos] >= '0' && p->text[p->pos] <= '9') p->pos++;
    } else { fail(p, "bad number"); return false; }
    if (p->pos < p->len && p->text[p->pos] == '.') {
        p->pos++;
        size_t digits = p->pos;
        while (p->pos < p->len && p->text[p->pos] >= '0' && p->text[p->pos] <= '9') p->pos++;
        if (p->pos == digits) { fail(p, "bad number"); return false; }
    }
    if (p->pos < p->len && (p->text[p->pos] == 'e' || p->text[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->text[p->pos] == '+' || p->text[p->pos] == '-')) p->pos++;
        size_t digits = p->pos;
        while (p->pos < p->len && p->text[p->pos] >= '0' && p->text[p->pos] <= '9') p->pos++;
        if (p->pos == digits) { fail(p, "bad number"); return false; }
    }
    char buffer[64];
    size_t n = p->pos - start;
    if (n >= sizeof buffer) { fail(p, "number too long"); return false; }
    memcpy(buffer, p->text + start, n);
    buffer[n] = '\0';
    *out = strtod(buffer, NULL);
    return true;
}

static void free_children(json_value *v) {
    if (v->type == JSON_STRING) free(v->string);
    if (v->type == JSON_ARRAY || v->type == JSON_OBJECT) {
        for (size_t i = 0; i < v->count; i++) {
            free_children(&v->items[i]);
            if (v->keys) free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
}

static bool parse_value(parser *p, json_value *out, int depth);

static bool grow(parser *p, json_value *v, size_t *cap, bool keyed) {
    if (v->count < *cap) return true;
    size_t next = *cap ? *cap * 2 : 4;
    json_value *items = realloc(v->items, next * sizeof *items);
    if (!items) { fail(p, "out of memory"); return false; }
    v->items = items;
    if (keyed) {
        char **keys = realloc(v->keys, next * sizeof *keys);
        if (!keys) { fail(p, "out of memory"); return false; }
        v->keys = keys;
    }
    *cap = next;
    return true;
}

static bool parse_container(parser *p, json_value *out, int depth, bool object) {
    char close = object ? '}' : ']';
    size_t cap = 0;
    out->type = object ? JSON_OBJECT : JSON_ARRAY;
    p->pos++;
    skip_space(p);
    if (p->pos < p->len && p->text[p->pos] == close) { p->pos++; return true; }
    for (;;) {
        if (!grow(p, out, &cap, object)) return false;
        json_value *item = &out->items[out->count];
        memset(item, 0, sizeof *item);
        if (object) {
            skip_space(p);
            if (p->pos >= p->len || p->text[p->pos] != '"') { fail(p, "expected a member name"); return false; }
            size_t key_len;
            char *key = parse_string(p, &key_len);
            if (!key) return false;
            out->keys[out->count] = key;
            skip_space(p);
            if (p->pos >= p->len || p->text[p->pos] != ':') {
                out->count++; /* so the key is freed */
                fail(p, "expected ':'");
                return false;
            }
            p->pos++;
        }
        out->count++;
        if (!parse_value(p, item, depth + 1)) return false;
        skip_space(p);
        if (p->pos < p->len && p->text[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->len && p->text[p->pos] == close) { p->pos++; return true; }
        fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
        return false;
    }
}

static bool parse_value(parser *p, json_value *out, int depth) {
    if (depth > MAX_DEPTH) { fail(p, "nested too deeply"); return false; }
    skip_space(p);
    if (p->pos >= p->len) { fail(p, "unexpected end of input"); return false; }
    char c = p->text[p->pos];
    switch (c) {
    case '{': return parse_container(p, out, depth, true);
    case '[': return parse_container(p, out, depth, false);
    case '"':
        out->type = JSON_STRING;
        out->string = parse_string(p, &out->len);
        return out->string != NULL;
    case 't': if (literal(p, "true")) { out->type = JSON_BOOL; out->boolean = true; return true; } break;
    case 'f': if (literal(p, "false")) { out->type = JSON_BOOL; out->boolean = false; return true; } break;
    case 'n': if (literal(p, "null")) { out->type = JSON_NULL; return true; } break;
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            out->type = JSON_NUMBER;
            return parse_number(p, &out->number);
        }
    }
    fail(p, "unexpected character");
    return false;
}

json_value *json_parse(const char *text, size_t len, char *error, size_t error_len) {
    parser p = {text, len, 0, error, error_len, false};
    json_value *root = calloc(1, sizeof *root);
    if (!root) {
        snprintf(error, error_len, "out of memory");
        return NULL;
    }
    if (parse_value(&p, root, 0)) {
        skip_space(&p);
        if (p.pos == p.len) return root;
        fail(&p, "trailing characters");
    }
    json_free(root);
    return NULL;
}

void json_free(json_value *value) {
    if (!value) return;
    free_children(value);
    free(value);
}

const json_value *json_get(const json_value *object, const char *key) {
    if (!object || object->type != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < object->count; i++) {
        if (strcmp(object->keys[i], key) == 0) return &object->items[i];
    }
    return NULL;
}

const char *json_type_name(json_type type) {
    switch (type) {
    case JSON_NULL: return "null";
    case JSON_BOOL: return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "a list";
    case JSON_OBJECT: return "an object";
    }
    return "?";
}
