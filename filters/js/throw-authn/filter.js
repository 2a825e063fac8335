// throw-authn: a test fixture authenticator (world authenticator-filter)
// that fails as the request's `x-fault` header says, the ways a JavaScript
// author's code fails: it throws an Error or a string (the filter's error
// outcome, by the guard filters/build.sh builds every JavaScript filter
// with), or recurses without end (SpiderMonkey's InternalError: a trap,
// printed to stderr). `x-fault: user` authenticates `throw-authn`; anything
// else has no opinion. Not for production manifests.

function header(request, name) {
  const found = request.headers.find((h) => h.name === name);
  return found === undefined ? '' : found.value;
}

function descend(depth) {
  return descend(depth + 1) + 1;
}

export const authenticator = {
  authenticate(request) {
    const fault = header(request, 'x-fault');
    if (fault === 'throw') {
      throw new Error(`throw-authn: cannot read the credentials of ${request.path ?? 'this request'}`);
    }
    if (fault === 'type-error') {
      // Reading a field of undefined: a TypeError thrown by the engine.
      return request.missing.field;
    }
    if (fault === 'string') {
      throw 'throw-authn: a thrown string';
    }
    if (fault === 'recurse') {
      console.error('throw-authn: about to recurse without end');
      descend(0);
    }
    if (fault === 'user') {
      return { tag: 'authenticated', val: { name: 'throw-authn', uid: '', groups: [], extra: [] } };
    }
    return { tag: 'no-opinion' };
  },
};
