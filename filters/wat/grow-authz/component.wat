;; grow-authz: a test fixture authorizer written by hand in the WebAssembly
;; text format, as a component with two core instances, each with its own
;; linear memory, as a language toolchain that links two modules with their
;; own memories makes. It grows what the last byte of the request path says
;; (see README.md):
;;   .../memories  each of the two memories to 3 MiB (48 pages)
;;   .../table     a table by 1,000,000 elements (8 MB of the host's memory)
;;   anything else allow
;; A growth refused is a trap (`unreachable`), as a guest's allocator
;; aborts when it gets no memory; a growth granted is an `allow`.
(component
  (type $types (instance
    (type (list string))
    (type (record (field "key" string) (field "values" 0)))
    (export "extra-value" (type (eq 1)))
    (type (list 2))
    (type (record (field "name" string) (field "uid" string) (field "groups" 0) (field "extra" 3)))
    (export "user-info" (type (eq 4)))
    (type (option string))
    (type (record (field "is-resource-request" bool) (field "path" string) (field "verb" string)
      (field "api-prefix" 6) (field "api-group" string) (field "api-version" 6) (field "namespace" string)
      (field "resource" string) (field "subresource" string) (field "name" string)
      (field "label-selector" 6) (field "field-selector" 6)))
    (export "request-info" (type (eq 7)))
  ))
  (import "wasmgate:filter/types@0.4.0" (instance $types-instance (type $types)))

  ;; The second module: a memory of its own, grown when asked.
  (core module $second
    (memory 1)
    ;; Grows the memory to `pages`; -1 when refused.
    (func (export "grow-to") (param $pages i32) (result i32)
      (memory.grow (i32.sub (local.get $pages) (memory.size)))))

  ;; The main module: the authorizer, its memory and the canonical ABI's
  ;; realloc (a bump allocator: a call's inputs are small).
  (core module $main
    (import "second" "grow-to" (func $second-grow-to (param i32) (result i32)))
    (memory (export "memory") 1)
    (table $table 1 funcref)
    (global $heap (mut i32) (i32.const 1024))
    (func (export "cabi_realloc") (param i32 i32) (param $align i32) (param $size i32) (result i32)
      (local $at i32)
      (local.set $at
        (i32.and
          (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
          (i32.sub (i32.const 0) (local.get $align))))
      (global.set $heap (i32.add (local.get $at) (local.get $size)))
      (local.get $at))
    ;; `attributes` is passed by address: its request's path (a string,
    ;; address and length) is at offsets 36 and 40. The answer, ok(allow),
    ;; is twelve zero bytes at address 16.
    (func (export "wasmgate:filter/authorizer@0.4.0#authorize") (param $attributes i32) (result i32)
      (local $path i32)
      (local $len i32)
      (local $last i32)
      (local.set $path (i32.load offset=36 (local.get $attributes)))
      (local.set $len (i32.load offset=40 (local.get $attributes)))
      (if (local.get $len)
        (then (local.set $last (i32.load8_u (i32.sub (i32.add (local.get $path) (local.get $len)) (i32.const 1))))))
      ;; 's': .../memories
      (if (i32.eq (local.get $last) (i32.const 115))
        (then
          (if (i32.eq (memory.grow (i32.sub (i32.const 48) (memory.size))) (i32.const -1))
            (then unreachable))
          (if (i32.eq (call $second-grow-to (i32.const 48)) (i32.const -1))
            (then unreachable))))
      ;; 'e': .../table
      (if (i32.eq (local.get $last) (i32.const 101))
        (then
          (if (i32.eq (table.grow $table (ref.null func) (i32.const 1000000)) (i32.const -1))
            (then unreachable))))
      (i32.const 16)))

  (core instance $second-instance (instantiate $second))
  (core instance $main-instance (instantiate $main
    (with "second" (instance $second-instance))))

  (alias export $types-instance "user-info" (type $user-info))
  (alias export $types-instance "request-info" (type $request-info))
  (alias export $types-instance "extra-value" (type $extra-value))
  (type $attributes (record (field "user" $user-info) (field "request" $request-info)))
  (type $decision (variant (case "allow") (case "deny" string) (case "no-opinion" string)))
  (type $answer (result $decision (error string)))
  (type $authorize-type (func (param "attributes" $attributes) (result $answer)))
  (alias core export $main-instance "memory" (core memory $memory))
  (alias core export $main-instance "cabi_realloc" (core func $realloc))
  (alias core export $main-instance "wasmgate:filter/authorizer@0.4.0#authorize" (core func $authorize-core))
  (func $authorize (type $authorize-type)
    (canon lift (core func $authorize-core) (memory $memory) (realloc $realloc) string-encoding=utf8))

  ;; The exported interface names its types, as the component model asks of
  ;; an export: a component that imports them and exports them again.
  (component $interface
    (type (list string))
    (type (record (field "key" string) (field "values" 0)))
    (import "import-type-extra-value" (type (eq 1)))
    (type (list 2))
    (type (record (field "name" string) (field "uid" string) (field "groups" 0) (field "extra" 3)))
    (import "import-type-user-info" (type (eq 4)))
    (type (option string))
    (type (record (field "is-resource-request" bool) (field "path" string) (field "verb" string)
      (field "api-prefix" 6) (field "api-group" string) (field "api-version" 6) (field "namespace" string)
      (field "resource" string) (field "subresource" string) (field "name" string)
      (field "label-selector" 6) (field "field-selector" 6)))
    (import "import-type-request-info" (type (eq 7)))
    (type (record (field "user" 5) (field "request" 8)))
    (import "import-type-attributes" (type (eq 9)))
    (type (variant (case "allow") (case "deny" string) (case "no-opinion" string)))
    (import "import-type-decision" (type (eq 11)))
    (type (result 12 (error string)))
    (type (func (param "attributes" 10) (result 13)))
    (import "import-func-authorize" (func (type 14)))
    (export "user-info" (type 5))
    (export "request-info" (type 8))
    (type (record (field "user" 15) (field "request" 16)))
    (export "attributes" (type 17))
    (type (variant (case "allow") (case "deny" string) (case "no-opinion" string)))
    (export "decision" (type 19))
    (type (result 20 (error string)))
    (type (func (param "attributes" 18) (result 21)))
    (export "authorize" (func 0) (func (type 22))))
  (instance $interface-instance (instantiate $interface
    (with "import-func-authorize" (func $authorize))
    (with "import-type-extra-value" (type $extra-value))
    (with "import-type-user-info" (type $user-info))
    (with "import-type-request-info" (type $request-info))
    (with "import-type-attributes" (type $attributes))
    (with "import-type-decision" (type $decision))))
  (export "wasmgate:filter/authorizer@0.4.0" (instance $interface-instance))
)
