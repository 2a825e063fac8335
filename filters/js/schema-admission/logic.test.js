// Tests of logic.js (no bindings, no Wasm): filters/build.sh --test runs
// them with `node --test`.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { compilePolicy, ConfigError, NO_REQUEST_INFO, review, validate } from './logic.js';

const CONFIG = {
  schemas: [
    {
      resources: ['widgets'],
      api_groups: ['demo.example.io'],
      schema: {
        type: 'object',
        required: ['metadata', 'spec'],
        properties: {
          metadata: {
            type: 'object',
            properties: {
              name: { type: 'string', pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$', maxLength: 63 },
              labels: { type: 'object', additionalProperties: { type: 'string', maxLength: 63 } },
            },
          },
          spec: {
            type: 'object',
            required: ['replicas'],
            additionalProperties: false,
            properties: {
              replicas: { type: 'integer', minimum: 1, maximum: 10 },
              mode: { enum: ['fast', 'safe'] },
              ports: { type: 'array', maxItems: 3, uniqueItems: true, items: { type: 'integer', minimum: 1, maximum: 65535 } },
            },
          },
        },
      },
    },
  ],
};

const request = (object, { operation = 'create', verb = 'create', resource = 'widgets', group = 'demo.example.io' } = {}) => ({
  operation,
  object: object === undefined ? undefined : JSON.stringify(object),
  request: { verb, apiGroup: group, resource, subresource: '', name: '' },
});

const widget = (spec, name = 'w1') => ({ kind: 'Widget', metadata: { name, labels: { team: 'a' } }, spec });

test('valid objects are allowed', () => {
  const policy = compilePolicy(CONFIG);
  assert.equal(review(policy, request(widget({ replicas: 3, mode: 'safe', ports: [80, 443] }))).allowed, true);
});

test('invalid objects get kube 422 with every field error', () => {
  const policy = compilePolicy(CONFIG);
  const verdict = review(policy, request(widget({ replicas: 20, mode: 'slow', extra: 1, ports: [80, 80] }, 'Big')));
  assert.equal(verdict.allowed, false);
  assert.equal(verdict.status.code, 422);
  assert.equal(verdict.status.reason, 'Invalid');
  assert.equal(
    verdict.status.message,
    'Widget.demo.example.io "Big" is invalid: [metadata.name: Invalid value: "Big": must match the pattern \'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$\', ' +
      'spec.replicas: Invalid value: 20: must be less than or equal to 10, ' +
      'spec.mode: Unsupported value: "slow": supported values: "fast", "safe", ' +
      'spec.extra: Forbidden: unknown field "extra", spec.ports[1]: Duplicate value: 80]',
  );
});

test('a single error is not bracketed; required and type errors', () => {
  const policy = compilePolicy(CONFIG);
  assert.equal(review(policy, request(widget({}))).status.message, 'Widget.demo.example.io "w1" is invalid: spec.replicas: Required value');
  assert.equal(
    review(policy, request(widget({ replicas: 2.5 }))).status.message,
    'Widget.demo.example.io "w1" is invalid: spec.replicas: Invalid value: 2.5: must be of type integer',
  );
});

test('only the configured resources, groups and operations are checked', () => {
  const policy = compilePolicy(CONFIG);
  assert.equal(review(policy, request({}, { resource: 'gadgets' })).allowed, true);
  assert.equal(review(policy, request({}, { group: 'other.io' })).allowed, true);
  assert.equal(review(policy, request({}, { operation: 'delete', verb: 'delete' })).allowed, true);
  assert.equal(review(policy, request(widget({ replicas: 99 }), { operation: 'update', verb: 'update' })).allowed, false);
});

test('a review without the request info (left out by reads) is an error, never a guess', () => {
  const policy = compilePolicy(CONFIG);
  const blind = { ...request(widget({ replicas: 3 })), request: undefined };
  assert.throws(() => review(policy, blind), (thrown) => thrown === NO_REQUEST_INFO);
  assert.match(NO_REQUEST_INFO, /^schema-admission: .*reads must list "request"/);
});

test('patch documents are allowed unless the config denies them', () => {
  const patch = request({ spec: { replicas: 99 } }, { operation: 'update', verb: 'patch' });
  assert.equal(review(compilePolicy(CONFIG), patch).allowed, true);
  const strict = review(compilePolicy({ ...CONFIG, patch_requests: 'deny' }), patch);
  assert.equal(strict.allowed, false);
  assert.equal(strict.status.code, 403);
});

test('validate covers strings, numbers and arrays', () => {
  const schema = compilePolicy({ schemas: [{ schema: { type: 'array', minItems: 2, items: { type: ['string', 'null'], minLength: 2 } } }] }).schemas[0].schema;
  assert.deepEqual(validate(schema, ['ab', null]), []);
  assert.deepEqual(validate(schema, ['a']), [
    '<root>: Invalid value: 1 items: must have at least 2 items',
    '[0]: Invalid value: "a": must have at least 2 characters',
  ]);
});

test('config mistakes are named', () => {
  const bad = (config, message) =>
    assert.throws(() => compilePolicy(config), (error) => error instanceof ConfigError && error.message === `schema-admission: bad config: ${message}`);
  bad([], 'the config must be a table');
  bad({}, 'schemas must be a list of tables');
  bad({ schemas: [], other: 1 }, 'unknown key "other" (expected schemas, patch_requests)');
  bad({ schemas: [{}] }, 'schemas[0].schema is missing');
  bad({ schemas: [{ schema: { type: 'int' } }] }, 'schemas[0].schema.type: "int" is not one of object, array, string, number, integer, boolean, null');
  bad({ schemas: [{ schema: { properties: { a: { minLenght: 1 } } } }] }, 'schemas[0].schema.properties.a: unsupported schema keyword "minLenght"');
  bad({ schemas: [{ schema: { pattern: '(' } }] }, 'schemas[0].schema.pattern: Invalid regular expression: /(/u: Unterminated group');
  bad({ schemas: [{ operations: ['write'], schema: {} }] }, 'schemas[0].operations: "write" is not one of create, update, delete, connect');
  bad({ schemas: [], patch_requests: 'maybe' }, 'patch_requests must be "allow" or "deny"');
});
