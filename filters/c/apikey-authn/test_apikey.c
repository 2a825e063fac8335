/* Host tests of apikey.c, json.c and sha256.c (no WIT, no Wasm):
 *   cc -std=c11 -Wall -o /tmp/test_apikey apikey.c json.c sha256.c test_apikey.c && /tmp/test_apikey
 * filters/build.sh --test runs them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apikey.h"
#include "json.h"
#include "sha256.h"

static int failures, checks;

#define CHECK(cond)                                                          \
    do {                                                                     \
        checks++;                                                            \
        if (!(cond)) {                                                       \
            failures++;                                                      \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                    \
    } while (0)

static void hex(const uint8_t digest[32], char out[65]) {
    for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", digest[i]);
}

static void test_sha256(void) {
    uint8_t d[32];
    char h[65];
    sha256("", 0, d);
    hex(d, h);
    CHECK(strcmp(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0);
    sha256("abc", 3, d);
    hex(d, h);
    CHECK(strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256(two_blocks, strlen(two_blocks), d);
    hex(d, h);
    CHECK(strcmp(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0);
}

static void test_json(void) {
    char error[128];
    const char *text = " {\"a\": [1, -2.5e2, true, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\"} ";
    json_value *v = json_parse(text, strlen(text), error, sizeof error);
    CHECK(v && v->type == JSON_OBJECT && v->count == 2);
    const json_value *a = json_get(v, "a");
    CHECK(a && a->type == JSON_ARRAY && a->count == 4);
    CHECK(a && a->items[1].number == -250.0 && a->items[2].boolean && a->items[3].type == JSON_NULL);
    const json_value *s = json_get(v, "s");
    CHECK(s && strcmp(s->string, "x\xc3\xa9\xf0\x9f\x98\x80\n") == 0);
    json_free(v);
    const char *bad[] = {"", "{", "[1,]", "{\"a\":1,}", "01", "\"\\x\"", "tru", "{} x", "\"\\ud800\"", "[\"a\nb\"]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_value *b = json_parse(bad[i], strlen(bad[i]), error, sizeof error);
        CHECK(b == NULL);
        json_free(b);
    }
}

static const char *CONFIG =
    "{\"keys\": ["
    " {\"key\": \"ci-secret\", \"user\": \"ci-bot\", \"uid\": \"42\", \"groups\": [\"ci\", \"deployers\"], \"name\": \"ci-2026\"},"
    /* sha256("ops-secret") */
    " {\"sha256\": \"4d6a8b5ef1f1bfb2a1d0fcd3c9f22d6ab3b8ae7f4d0e1c2b3a4958677a6b5c4d\", \"user\": \"nobody\"},"
    " {\"sha256\": \"%s\", \"user\": \"ops\"}"
    "]}";

static void test_config_and_lookup(void) {
    uint8_t d[32];
    char h[65], text[1024], error[256];
    sha256("ops-secret", 10, d);
    hex(d, h);
    snprintf(text, sizeof text, CONFIG, h);
    apikey_config c;
    CHECK(apikey_config_parse(text, strlen(text), &c, error, sizeof error) == 0);
    CHECK(strcmp(c.header, "x-api-key") == 0 && strcmp(c.scheme, "") == 0 && c.key_count == 3);
    const apikey_entry *e = apikey_lookup(&c, "ci-secret", 9);
    CHECK(e && strcmp(e->user, "ci-bot") == 0 && strcmp(e->uid, "42") == 0 && e->group_count == 2 &&
          strcmp(e->groups[1], "deployers") == 0 && strcmp(e->name, "ci-2026") == 0);
    e = apikey_lookup(&c, "ops-secret", 10);
    CHECK(e && strcmp(e->user, "ops") == 0 && e->group_count == 0 && strcmp(e->uid, "") == 0);
    CHECK(apikey_lookup(&c, "ci-secre", 8) == NULL);
    CHECK(apikey_lookup(&c, "", 0) == NULL);

    const char *key;
    size_t len;
    CHECK(apikey_from_header(&c, "  ci-secret ", 12, &key, &len) && len == 9 && memcmp(key, "ci-secret", 9) == 0);
    CHECK(!apikey_from_header(&c, "   ", 3, &key, &len));
    CHECK(!apikey_from_header(&c, "two words", 9, &key, &len));
    apikey_config_free(&c);

    const char *schemed = "{\"header\": \"Authorization\", \"scheme\": \"ApiKey\", \"keys\": []}";
    CHECK(apikey_config_parse(schemed, strlen(schemed), &c, error, sizeof error) == 0);
    CHECK(strcmp(c.header, "authorization") == 0);
    CHECK(apikey_from_header(&c, "apikey  abc", 11, &key, &len) && len == 3 && memcmp(key, "abc", 3) == 0);
    CHECK(!apikey_from_header(&c, "Bearer abc", 10, &key, &len));
    CHECK(!apikey_from_header(&c, "ApiKey", 6, &key, &len));
    CHECK(!apikey_from_header(&c, "ApiKeyabc", 9, &key, &len));
    apikey_config_free(&c);
}

static void expect_bad(const char *text, const char *message) {
    apikey_config c;
    char error[256] = "";
    int result = apikey_config_parse(text, strlen(text), &c, error, sizeof error);
    CHECK(result == -1);
    if (strstr(error, message) == NULL || strncmp(error, "apikey-authn: bad config: ", 26) != 0) {
        failures++;
        fprintf(stderr, "for %s: expected an error with \"%s\", got \"%s\"\n", text, message, error);
    }
}

static void test_bad_configs(void) {
    expect_bad("[]", "the config is a list, expected an object");
    expect_bad("{}", "keys is missing, expected a list");
    expect_bad("{\"keys\": {}}", "keys is an object, expected a list");
    expect_bad("{\"keys\": [], \"extra\": 1}", "unknown key extra");
    expect_bad("{\"keys\": [{\"user\": \"a\"}]}", "keys[0] needs exactly one of key and sha256");
    expect_bad("{\"keys\": [{\"key\": \"k\", \"sha256\": \"00\", \"user\": \"a\"}]}", "exactly one of key and sha256");
    expect_bad("{\"keys\": [{\"key\": \"k\"}]}", "keys[0].user is missing or empty");
    expect_bad("{\"keys\": [{\"key\": \"a b\", \"user\": \"a\"}]}", "keys[0].key contains whitespace");
    expect_bad("{\"keys\": [{\"sha256\": \"xyz\", \"user\": \"a\"}]}", "keys[0].sha256 is not 64 hexadecimal digits");
    expect_bad("{\"keys\": [{\"key\": \"k\", \"user\": \"a\", \"groups\": \"g\"}]}", "keys[0].groups is a string, expected a list");
    expect_bad("{\"keys\": [{\"key\": \"k\", \"user\": \"a\"}, {\"key\": \"k\", \"user\": \"b\"}]}", "keys[1] has the same key as keys[0]");
    expect_bad("{\"keys\": [{\"key\": \"k\", \"user\": 1}]}", "keys[0].user is a number, expected a string");
    expect_bad("{\"header\": \"\", \"keys\": []}", "header must be a header name");
    expect_bad("{\"keys\": [", "unexpected end of input");
}

int main(void) {
    test_sha256();
    test_json();
    test_config_and_lookup();
    test_bad_configs();
    printf("apikey-authn: %d of %d checks passed\n", checks - failures, checks);
    return failures ? 1 : 0;
}
