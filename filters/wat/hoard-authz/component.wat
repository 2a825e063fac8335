;; hoard-authz: a test fixture authorizer written by hand in the WebAssembly
;; text format, as a component that holds more than a filter may: sixteen
;; core instances of a module with a linear memory and a table of its own,
;; beside the authorizer's (seventeen core instances, seventeen memories,
;; sixteen tables). It answers every call `ok(allow)` (see README.md).
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

  ;; A module holding a memory and a table, instantiated sixteen times.
  (core module $hoard
    (memory 1)
    (table 1 funcref))

  ;; The authorizer, its memory and the canonical ABI's realloc (a bump
  ;; allocator: a call's inputs are small).
  (core module $main
    (memory (export "memory") 1)
    (global $heap (mut i32) (i32.const 1024))
    (func (export "cabi_realloc") (param i32 i32) (param $align i32) (param $size i32) (result i32)
      (local $at i32)
      (local.set $at
        (i32.and
          (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
          (i32.sub (i32.const 0) (local.get $align))))
      (global.set $heap (i32.add (local.get $at) (local.get $size)))
      (local.get $at))
    ;; The answer, ok(allow), is twelve zero bytes at address 16.
    (func (export "wasmgate:filter/authorizer@0.4.0#authorize") (param $attributes i32) (result i32)
      (i32.const 16)))

  (core instance $hoard-1 (instantiate $hoard))
  (core instance $hoard-2 (instantiate $hoard))
  (core instance $hoard-3 (instantiate $hoard))
  (core instance $hoard-4 (instantiate $hoard))
  (core instance $hoard-5 (instantiate $hoard))
  (core instance $hoard-6 (instantiate $hoard))
  (core instance $hoard-7 (instantiate $hoard))
  (core instance $hoard-8 (instantiate $hoard))
  (core instance $hoard-9 (instantiate $hoard))
  (core instance $hoard-10 (instantiate $hoard))
  (core instance $hoard-11 (instantiate $hoard))
  (core instance $hoard-12 (instantiate $hoard))
  (core instance $hoard-13 (instantiate $hoard))
  (core instance $hoard-14 (instantiate $hoard))
  (core instance $hoard-15 (instantiate $hoard))
  (core instance $hoard-16 (instantiate $hoard))
  (core instance $main-instance (instantiate $main))

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
