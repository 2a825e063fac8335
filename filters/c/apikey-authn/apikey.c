/* See apikey.h. */
#include "apikey.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "sha256.h"

static int bad(char *error, size_t error_len, const char *format, ...) {
    int n = snprintf(error, error_len, "apikey-authn: bad config: ");
    if (n > 0 && (size_t)n < error_len) {
        va_list args;
        va_start(args, format);
        vsnprintf(error + n, error_len - (size_t)n, format, args);
        va_end(args);
    }
    return -1;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *out = malloc(n + 1);
    if (out) memcpy(out, s, n + 1);
    return out;
}

static bool has_blank(const char *s) {
    for (; *s; s++) {
        if (isspace((unsigned char)*s)) return true;
    }
    return false;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* An optional string member: NULL when absent, `fallback` when null. */
static int optional_string(const json_value *object, const char *key, const char *where, const char **out,
                           char *error, size_t error_len) {
    const json_value *v = json_get(object, key);
    *out = NULL;
    if (!v || v->type == JSON_NULL) return 0;
    if (v->type != JSON_STRING) {
        return bad(error, error_len, "%s%s is %s, expected a string", where, key, json_type_name(v->type));
    }
    *out = v->string;
    return 0;
}

static int check_members(const json_value *object, const char *const *allowed, const char *where, char *error,
                         size_t error_len) {
    for (size_t i = 0; i < object->count; i++) {
        bool known = false;
        for (const char *const *a = allowed; *a; a++) known = known || strcmp(object->keys[i], *a) == 0;
        if (!known) return bad(error, error_len, "unknown key %s%s", where, object->keys[i]);
    }
    return 0;
}

static int parse_entry(const json_value *v, size_t index, apikey_entry *entry, char *error, size_t error_len) {
    static const char *const allowed[] = {"key", "sha256", "user", "uid", "groups", "name", NULL};
    char where[32];
    snprintf(where, sizeof where, "keys[%zu].", index);
    if (v->type != JSON_OBJECT) {
        return bad(error, error_len, "keys[%zu] is %s, expected an object", index, json_type_name(v->type));
    }
    if (check_members(v, allowed, where, error, error_len)) return -1;
    const char *key, *digest, *user, *uid, *name;
    if (optional_string(v, "key", where, &key, error, error_len) ||
        optional_string(v, "sha256", where, &digest, error, error_len) ||
        optional_string(v, "user", where, &user, error, error_len) ||
        optional_string(v, "uid", where, &uid, error, error_len) ||
        optional_string(v, "name", where, &name, error, error_len)) {
        return -1;
    }
    if ((key == NULL) == (digest == NULL)) {
        return bad(error, error_len, "keys[%zu] needs exactly one of key and sha256", index);
    }
    if (key) {
        if (!*key) return bad(error, error_len, "keys[%zu].key is empty", index);
        if (has_blank(key)) return bad(error, error_len, "keys[%zu].key contains whitespace", index);
        sha256(key, strlen(key), entry->digest);
    } else {
        if (strlen(digest) != 64) {
            return bad(error, error_len, "keys[%zu].sha256 is not 64 hexadecimal digits", index);
        }
        for (int i = 0; i < 32; i++) {
            int hi = hex_digit(digest[2 * i]), lo = hex_digit(digest[2 * i + 1]);
            if (hi < 0 || lo < 0) {
                return bad(error, error_len, "keys[%zu].sha256 is not 64 hexadecimal digits", index);
            }
            entry->digest[i] = (uint8_t)(hi << 4 | lo);
        }
    }
    if (!user || !*user) return bad(error, error_len, "keys[%zu].user is missing or empty", index);
    const json_value *groups = json_get(v, "groups");
    size_t group_count = 0;
    if (groups && groups->type != JSON_NULL) {
        if (groups->type != JSON_ARRAY) {
            return bad(error, error_len, "keys[%zu].groups is %s, expected a list", index, json_type_name(groups->type));
        }
        for (size_t i = 0; i < groups->count; i++) {
            if (groups->items[i].type != JSON_STRING || !groups->items[i].len) {
                return bad(error, error_len, "keys[%zu].groups[%zu] is not a non-empty string", index, i);
            }
        }
        group_count = groups->count;
    }
    entry->user = dup_str(user);
    entry->uid = dup_str(uid ? uid : "");
    entry->name = dup_str(name ? name : "");
    entry->groups = calloc(group_count ? group_count : 1, sizeof *entry->groups);
    bool ok = entry->user && entry->uid && entry->name && entry->groups;
    for (size_t i = 0; ok && i < group_count; i++) {
        entry->groups[i] = dup_str(groups->items[i].string);
        ok = entry->groups[i] != NULL;
        entry->group_count = i + 1;
    }
    return ok ? 0 : bad(error, error_len, "out of memory");
}

int apikey_config_parse(const char *json, size_t len, apikey_config *out, char *error, size_t error_len) {
    static const char *const allowed[] = {"header", "scheme", "keys", NULL};
    memset(out, 0, sizeof *out);
    char parse_error[128];
    json_value *root = json_parse(json, len, parse_error, sizeof parse_error);
    if (!root) return bad(error, error_len, "%s", parse_error);
    int result = -1;
    const char *header = NULL, *scheme = NULL;
    const json_value *keys = json_get(root, "keys");
    if (root->type != JSON_OBJECT) {
        bad(error, error_len, "the config is %s, expected an object", json_type_name(root->type));
    } else if (check_members(root, allowed, "", error, error_len) ||
               optional_string(root, "header", "", &header, error, error_len) ||
               optional_string(root, "scheme", "", &scheme, error, error_len)) {
        /* reported */
    } else if (header && (!*header || has_blank(header))) {
        bad(error, error_len, "header must be a header name");
    } else if (scheme && has_blank(scheme)) {
        bad(error, error_len, "scheme must be one word");
    } else if (!keys || keys->type != JSON_ARRAY) {
        bad(error, error_len, "keys is %s, expected a list", keys ? json_type_name(keys->type) : "missing");
    } else {
        out->header = dup_str(header ? header : APIKEY_DEFAULT_HEADER);
        out->scheme = dup_str(scheme ? scheme : "");
        out->keys = calloc(keys->count ? keys->count : 1, sizeof *out->keys);
        if (!out->header || !out->scheme || !out->keys) {
            bad(error, error_len, "out of memory");
        } else {
            for (char *c = out->header; *c; c++) *c = (char)tolower((unsigned char)*c);
            result = 0;
            for (size_t i = 0; result == 0 && i < keys->count; i++) {
                result = parse_entry(&keys->items[i], i, &out->keys[i], error, error_len);
                out->key_count = i + 1;
                for (size_t j = 0; result == 0 && j < i; j++) {
                    if (memcmp(out->keys[j].digest, out->keys[i].digest, 32) == 0) {
                        result = bad(error, error_len, "keys[%zu] has the same key as keys[%zu]", i, j);
                    }
                }
            }
        }
        if (result != 0) apikey_config_free(out);
    }
    json_free(root);
    return result;
}

void apikey_config_free(apikey_config *config) {
    for (size_t i = 0; i < config->key_count; i++) {
        apikey_entry *e = &config->keys[i];
        for (size_t j = 0; j < e->group_count; j++) free(e->groups[j]);
        free(e->groups);
        free(e->user);
        free(e->uid);
        free(e->name);
    }
    free(config->keys);
    free(config->header);
    free(config->scheme);
    memset(config, 0, sizeof *config);
}

static bool blank(char c) { return c == ' ' || c == '\t'; }

bool apikey_from_header(const apikey_config *config, const char *value, size_t len, const char **key, size_t *key_len) {
    while (len && blank(*value)) { value++; len--; }
    while (len && blank(value[len - 1])) len--;
    size_t scheme_len = strlen(config->scheme);
    if (scheme_len) {
        if (len <= scheme_len || !blank(value[scheme_len])) return false;
        for (size_t i = 0; i < scheme_len; i++) {
            if (tolower((unsigned char)value[i]) != tolower((unsigned char)config->scheme[i])) return false;
        }
        value += scheme_len;
        len -= scheme_len;
        while (len && blank(*value)) { value++; len--; }
    }
    if (!len) return false;
    for (size_t i = 0; i < len; i++) {
        if (blank(value[i])) return false;
    }
    *key = value;
    *key_len = len;
    return true;
}

const apikey_entry *apikey_lookup(const apikey_config *config, const char *key, size_t key_len) {
    uint8_t digest[32];
    sha256(key, key_len, digest);
    const apikey_entry *found = NULL;
    for (size_t i = 0; i < config->key_count; i++) {
        uint8_t diff = 0;
        for (int j = 0; j < 32; j++) diff |= (uint8_t)(digest[j] ^ config->keys[i].digest[j]);
        /* No early exit: every entry is compared whatever matched. */
        if (diff == 0) found = &config->keys[i];
    }
    return found;
}
