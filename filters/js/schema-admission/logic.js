// The logic of schema-admission, free of bindings and host calls: compile the
// config's schemas, then review an admission request. filter.js feeds it the
// WIT records; logic.test.js runs it under node.

export const FILTER = 'schema-admission';
const TYPES = ['object', 'array', 'string', 'number', 'integer', 'boolean', 'null'];
const OPERATIONS = ['create', 'update', 'delete', 'connect'];
const KEYWORDS = new Set([
  'type', 'enum', 'const', 'required', 'properties', 'additionalProperties', 'items',
  'minItems', 'maxItems', 'uniqueItems', 'minLength', 'maxLength', 'pattern',
  'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf',
  'minProperties', 'maxProperties', 'description', 'title', '$comment',
]);
const MAX_REPORTED = 20;

export class ConfigError extends Error {
  constructor(message) {
    super(`${FILTER}: bad config: ${message}`);
  }
}

const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value);
const typeOf = (value) =>
  value === null ? 'null' : Array.isArray(value) ? 'array' : Number.isInteger(value) ? 'integer' : typeof value;
const matchesType = (value, type) =>
  type === typeOf(value) || (type === 'number' && typeof value === 'number');
const naturalNumber = (value) => Number.isInteger(value) && value >= 0;

function stringList(value, where, allowed) {
  if (!Array.isArray(value) || !value.every((item) => typeof item === 'string')) {
    throw new ConfigError(`${where} must be a list of strings`);
  }
  for (const item of value) {
    if (allowed && !allowed.includes(item)) {
      throw new ConfigError(`${where}: "${item}" is not one of ${allowed.join(', ')}`);
    }
  }
  return value;
}

// Checks one schema (and its subschemas) and compiles its patterns.
function compileSchema(schema, where) {
  if (!isObject(schema)) throw new ConfigError(`${where} must be a table (a JSON schema)`);
  const compiled = { ...schema };
  for (const key of Object.keys(schema)) {
    if (!KEYWORDS.has(key)) throw new ConfigError(`${where}: unsupported schema keyword "${key}"`);
  }
  if ('type' in schema) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    for (const type of types) {
      if (!TYPES.includes(type)) throw new ConfigError(`${where}.type: ${JSON.stringify(type)} is not one of ${TYPES.join(', ')}`);
    }
    compiled.type = types;
  }
  if ('enum' in schema && !Array.isArray(schema.enum)) throw new ConfigError(`${where}.enum must be a list`);
  if ('required' in schema) stringList(schema.required, `${where}.required`);
  for (const key of ['minItems', 'maxItems', 'minLength', 'maxLength', 'minProperties', 'maxProperties']) {
    if (key in schema && !naturalNumber(schema[key])) throw new ConfigError(`${where}.${key} must be a whole number`);
  }
  for (const key of ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf']) {
    if (key in schema && typeof schema[key] !== 'number') throw new ConfigError(`${where}.${key} must be a number`);
  }
  if ('multipleOf' in schema && !(schema.multipleOf > 0)) throw new ConfigError(`${where}.multipleOf must be above 0`);
  if ('uniqueItems' in schema && typeof schema.uniqueItems !== 'boolean') throw new ConfigError(`${where}.uniqueItems must be true or false`);
  if ('pattern' in schema) {
    if (typeof schema.pattern !== 'string') throw new ConfigError(`${where}.pattern must be a string`);
    try {
      compiled.regex = new RegExp(schema.pattern, 'u');
    } catch (error) {
      throw new ConfigError(`${where}.pattern: ${error.message}`);
    }
  }
  if ('properties' in schema) {
    if (!isObject(schema.properties)) throw new ConfigError(`${where}.properties must be a table of schemas`);
    compiled.properties = {};
    for (const [name, sub] of Object.entries(schema.properties)) {
      compiled.properties[name] = compileSchema(sub, `${where}.properties.${name}`);
    }
  }
  if ('additionalProperties' in schema && typeof schema.additionalProperties !== 'boolean') {
    compiled.additionalProperties = compileSchema(schema.additionalProperties, `${where}.additionalProperties`);
  }
  if ('items' in schema) compiled.items = compileSchema(schema.items, `${where}.items`);
  return compiled;
}

// The policy of a config (the manifest's `config` table, decoded).
export function compilePolicy(config) {
  if (!isObject(config)) throw new ConfigError('the config must be a table');
  for (const key of Object.keys(config)) {
    if (!['schemas', 'patch_requests'].includes(key)) {
      throw new ConfigError(`unknown key "${key}" (expected schemas, patch_requests)`);
    }
  }
  const patchRequests = config.patch_requests ?? 'allow';
  if (!['allow', 'deny'].includes(patchRequests)) throw new ConfigError('patch_requests must be "allow" or "deny"');
  if (!Array.isArray(config.schemas)) throw new ConfigError('schemas must be a list of tables');
  const schemas = config.schemas.map((entry, index) => {
    const where = `schemas[${index}]`;
    if (!isObject(entry)) throw new ConfigError(`${where} must be a table`);
    for (const key of Object.keys(entry)) {
      if (!['resources', 'api_groups', 'operations', 'schema'].includes(key)) {
        throw new ConfigError(`${where}: unknown key "${key}" (expected resources, api_groups, operations, schema)`);
      }
    }
    if (!('schema' in entry)) throw new ConfigError(`${where}.schema is missing`);
    return {
      resources: entry.resources === undefined ? ['*'] : stringList(entry.resources, `${where}.resources`),
      apiGroups: entry.api_groups === undefined ? ['*'] : stringList(entry.api_groups, `${where}.api_groups`),
      operations: entry.operations === undefined ? ['create', 'update'] : stringList(entry.operations, `${where}.operations`, OPERATIONS),
      schema: compileSchema(entry.schema, `${where}.schema`),
    };
  });
  return { schemas, patchRequests };
}

// kube's field paths: spec.containers[0].image.
const child = (path, key) => (typeof key === 'number' ? `${path}[${key}]` : path ? `${path}.${key}` : key);
const shown = (value) => {
  const text = JSON.stringify(value);
  return text.length > 64 ? `${text.slice(0, 61)}...` : text;
};
const deepEqual = (a, b) => JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (isObject(value)) return Object.fromEntries(Object.keys(value).sort().map((key) => [key, canonical(value[key])]));
  return value;
}

// Appends to `errors` every way `value` breaks `schema`, as kube field errors.
export function validate(schema, value, path = '', errors = []) {
  const at = path || '<root>';
  if (schema.type && !schema.type.some((type) => matchesType(value, type))) {
    errors.push(`${at}: Invalid value: ${shown(value)}: must be of type ${schema.type.join(' or ')}`);
    return errors;
  }
  if (schema.enum && !schema.enum.some((allowed) => deepEqual(allowed, value))) {
    errors.push(`${at}: Unsupported value: ${shown(value)}: supported values: ${schema.enum.map(shown).join(', ')}`);
  }
  if ('const' in schema && !deepEqual(schema.const, value)) {
    errors.push(`${at}: Invalid value: ${shown(value)}: must be ${shown(schema.const)}`);
  }
  if (typeof value === 'number') {
    if ('minimum' in schema && value < schema.minimum) errors.push(`${at}: Invalid value: ${value}: must be greater than or equal to ${schema.minimum}`);
    if ('maximum' in schema && value > schema.maximum) errors.push(`${at}: Invalid value: ${value}: must be less than or equal to ${schema.maximum}`);
    if ('exclusiveMinimum' in schema && value <= schema.exclusiveMinimum) errors.push(`${at}: Invalid value: ${value}: must be greater than ${schema.exclusiveMinimum}`);
    if ('exclusiveMaximum' in schema && value >= schema.exclusiveMaximum) errors.push(`${at}: Invalid value: ${value}: must be less than ${schema.exclusiveMaximum}`);
    if ('multipleOf' in schema && !Number.isInteger(value / schema.multipleOf)) errors.push(`${at}: Invalid value: ${value}: must be a multiple of ${schema.multipleOf}`);
  }
  if (typeof value === 'string') {
    const length = [...value].length;
    if ('minLength' in schema && length < schema.minLength) errors.push(`${at}: Invalid value: ${shown(value)}: must have at least ${schema.minLength} characters`);
    if ('maxLength' in schema && length > schema.maxLength) errors.push(`${at}: Too long: must have at most ${schema.maxLength} characters`);
    if (schema.regex && !schema.regex.test(value)) errors.push(`${at}: Invalid value: ${shown(value)}: must match the pattern '${schema.pattern}'`);
  }
  if (Array.isArray(value)) {
    if ('minItems' in schema && value.length < schema.minItems) errors.push(`${at}: Invalid value: ${value.length} items: must have at least ${schema.minItems} items`);
    if ('maxItems' in schema && value.length > schema.maxItems) errors.push(`${at}: Too many: ${value.length}: must have at most ${schema.maxItems} items`);
    if (schema.uniqueItems) {
      const seen = new Set();
      value.forEach((item, index) => {
        const key = JSON.stringify(canonical(item));
        if (seen.has(key)) errors.push(`${child(path, index)}: Duplicate value: ${shown(item)}`);
        seen.add(key);
      });
    }
    if (schema.items) value.forEach((item, index) => validate(schema.items, item, child(path, index), errors));
  }
  if (isObject(value)) {
    const keys = Object.keys(value);
    if ('minProperties' in schema && keys.length < schema.minProperties) errors.push(`${at}: Invalid value: ${keys.length} fields: must have at least ${schema.minProperties} fields`);
    if ('maxProperties' in schema && keys.length > schema.maxProperties) errors.push(`${at}: Too many: ${keys.length}: must have at most ${schema.maxProperties} fields`);
    for (const name of schema.required ?? []) {
      if (value[name] === undefined || value[name] === null) errors.push(`${child(path, name)}: Required value`);
    }
    for (const name of keys) {
      const sub = schema.properties?.[name];
      if (sub) {
        validate(sub, value[name], child(path, name), errors);
      } else if (schema.additionalProperties === false) {
        errors.push(`${child(path, name)}: Forbidden: unknown field "${name}"`);
      } else if (isObject(schema.additionalProperties)) {
        validate(schema.additionalProperties, value[name], child(path, name), errors);
      }
    }
  }
  return errors;
}

// Why a review without the request info fails, and how to fix the manifest.
export const NO_REQUEST_INFO = `${FILTER}: not given the request info, which picks the schemas: the manifest entry's reads must list "request" (or be left out)`;

const listed = (list, value) => list.includes('*') || list.includes(value);

// The review of one request: `{ allowed: true, why }` or
// `{ allowed: false, status: { code, reason, message } }`. `request` has the
// fields of the WIT admission-request as componentize-js gives them
// (operation, request: { verb, apiGroup, resource, subresource, name }, object).
// The schemas are chosen by the request info, which the manifest's `reads`
// can leave out (undefined): then this throws NO_REQUEST_INFO, the filter's
// error outcome, rather than validate against a guess.
export function review(policy, request) {
  const info = request.request;
  if (info === undefined || info === null) throw NO_REQUEST_INFO;
  const resource = info.subresource ? `${info.resource}/${info.subresource}` : info.resource;
  const applicable = policy.schemas.filter(
    (entry) => listed(entry.resources, resource) && listed(entry.apiGroups, info.apiGroup) && entry.operations.includes(request.operation),
  );
  if (applicable.length === 0) return { allowed: true, why: `no schema for ${resource} ${request.operation}` };
  if (info.verb === 'patch') {
    if (policy.patchRequests === 'allow') return { allowed: true, why: 'a patch document is not an object: not validated' };
    return {
      allowed: false,
      status: { code: 403, reason: 'Forbidden', message: `${FILTER}: patch requests are not allowed on ${resource}: use update` },
    };
  }
  let object;
  try {
    object = request.object === undefined || request.object === null ? null : JSON.parse(request.object);
  } catch (error) {
    return { allowed: false, status: { code: 400, reason: 'BadRequest', message: `the object is not JSON: ${error.message}` } };
  }
  const errors = [];
  for (const entry of applicable) validate(entry.schema, object, '', errors);
  if (errors.length === 0) return { allowed: true, why: `valid against ${applicable.length} schema(s)` };
  // kube's StatusError for an invalid object: `<Kind>.<group> "<name>" is invalid: ...`.
  const kind = (isObject(object) && typeof object.kind === 'string' && object.kind) || info.resource;
  const qualified = info.apiGroup ? `${kind}.${info.apiGroup}` : kind;
  const name = (isObject(object) && isObject(object.metadata) && object.metadata.name) || info.name || '';
  const reported = errors.slice(0, MAX_REPORTED);
  if (errors.length > MAX_REPORTED) reported.push(`and ${errors.length - MAX_REPORTED} more`);
  const detail = reported.length === 1 ? reported[0] : `[${reported.join(', ')}]`;
  return { allowed: false, status: { code: 422, reason: 'Invalid', message: `${qualified} ${JSON.stringify(name)} is invalid: ${detail}` } };
}
