//! The library's modules form a graph without cycles that reads bottom-up,
//! as kube's Go packages must (Go refuses an import cycle; Rust does not, so
//! this test does). Every `src/**/*.rs` of the library is parsed with `syn`,
//! and every reference to another module is collected: `use` items, paths in
//! code, `crate::…` paths inside macro calls, and `crate::…` in doc
//! comments. Docs count because a module whose docs send the reader up to a
//! module that imports it is as tangled to read as one that imports it.
//!
//! Checked: no cycle between top-level modules; none between the children
//! of `chain` and of `server` (where a child reaching back into `mod.rs`
//! while `mod.rs` builds from it is the cycle that matters); and
//! docs/architecture.md's module map lists every top-level module, bottom-up,
//! each after every module it imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// A module's path below the crate root: `["chain", "audit"]`.
type ModulePath = Vec<String>;

/// The parents whose children are checked among themselves.
const PARENTS_CHECKED: [&str; 2] = ["chain", "server"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The library's source files with the module each one is; `lib.rs` only
/// declares modules and `main.rs` is the binary, a crate of its own.
fn library_files() -> Vec<(PathBuf, ModulePath)> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read a folder of src/") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&src(), &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|file| {
            let relative = file.strip_prefix(src()).ok()?.with_extension("");
            let mut module: ModulePath = relative
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|last| last == "mod") {
                module.pop();
            }
            let root = module == ["lib"] || module == ["main"];
            (!root).then_some((file, module))
        })
        .collect()
}

/// One file's syntax tree, with the module it is.
struct Parsed {
    file: PathBuf,
    module: ModulePath,
    tree: syn::File,
}

fn parse_library() -> Vec<Parsed> {
    library_files()
        .into_iter()
        .map(|(file, module)| {
            let text = std::fs::read_to_string(&file).expect("read a source file");
            let tree = syn::parse_file(&text)
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            Parsed { file, module, tree }
        })
        .collect()
}

/// Every module: one per file, and the inline `mod name { … }` ones.
fn known_modules(parsed: &[Parsed]) -> BTreeSet<ModulePath> {
    struct Inline<'a> {
        module: ModulePath,
        known: &'a mut BTreeSet<ModulePath>,
    }
    impl<'ast> Visit<'ast> for Inline<'_> {
        fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
            if item.content.is_some() {
                self.module.push(item.ident.to_string());
                self.known.insert(self.module.clone());
                visit::visit_item_mod(self, item);
                self.module.pop();
            }
        }
    }
    let mut known = BTreeSet::new();
    for file in parsed {
        known.insert(file.module.clone());
        Inline {
            module: file.module.clone(),
            known: &mut known,
        }
        .visit_file(&file.tree);
    }
    known
}

/// A reference from one module to another, and where it was seen.
struct Reference {
    from: ModulePath,
    to: ModulePath,
    file: PathBuf,
    spelled: String,
}

/// Collects the references of one file.
struct References<'a> {
    file: &'a Path,
    module: ModulePath,
    known: &'a BTreeSet<ModulePath>,
    found: Vec<Reference>,
}

impl References<'_> {
    /// Records `segments` (a path as written) when it names a module of the
    /// crate: `crate::`, `super::` and `self::` paths, and paths that start
    /// with a child module of the current one.
    fn record(&mut self, segments: &[String]) {
        let Some(first) = segments.first() else {
            return;
        };
        let absolute: ModulePath = match first.as_str() {
            "crate" => segments[1..].to_vec(),
            "self" => [self.module.as_slice(), &segments[1..]].concat(),
            "super" => {
                let ups = segments.iter().take_while(|s| *s == "super").count();
                let Some(base) = self.module.len().checked_sub(ups) else {
                    return;
                };
                [&self.module[..base], &segments[ups..]].concat()
            }
            _ if segments.len() > 1 => {
                let mut child = self.module.clone();
                child.push(first.clone());
                if !self.known.contains(&child) {
                    return;
                }
                [self.module.as_slice(), segments].concat()
            }
            _ => return,
        };
        let to = (1..=absolute.len())
            .rev()
            .map(|length| absolute[..length].to_vec())
            .find(|prefix| self.known.contains(prefix));
        if let Some(to) = to {
            self.found.push(Reference {
                from: self.module.clone(),
                to,
                file: self.file.to_owned(),
                spelled: segments.join("::"),
            });
        }
    }

    fn record_use(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.record_use(prefix, &path.tree);
                prefix.pop();
            }
            syn::UseTree::Name(name) if name.ident == "self" => self.record(&prefix.clone()),
            syn::UseTree::Name(name) => self.record_leaf(prefix, &name.ident),
            syn::UseTree::Rename(rename) => self.record_leaf(prefix, &rename.ident),
            syn::UseTree::Glob(_) => self.record(&prefix.clone()),
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.record_use(prefix, tree);
                }
            }
        }
    }

    fn record_leaf(&mut self, prefix: &[String], ident: &syn::Ident) {
        let mut path = prefix.to_vec();
        path.push(ident.to_string());
        self.record(&path);
    }

    /// `crate::a::b` sequences in a macro's tokens, which syn leaves unparsed.
    fn record_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        for (index, token) in tokens.iter().enumerate() {
            match token {
                TokenTree::Group(group) => self.record_tokens(group.stream()),
                TokenTree::Ident(ident) if ident == "crate" => {
                    let mut segments = vec!["crate".to_owned()];
                    let mut rest = tokens[index + 1..].iter();
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) =
                        (rest.next(), rest.next())
                    {
                        let Some(TokenTree::Ident(next)) = rest.next() else {
                            break;
                        };
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                    }
                    self.record(&segments);
                }
                _ => {}
            }
        }
    }

    /// `crate::a::b` in a doc comment's text.
    fn record_doc(&mut self, text: &str) {
        let mut rest = text;
        while let Some(start) = rest.find("crate::") {
            let tail = &rest[start..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(tail.len());
            let segments: Vec<String> = tail[..end]
                .split("::")
                .filter(|segment| !segment.is_empty())
                .map(str::to_owned)
                .collect();
            self.record(&segments);
            rest = &tail[end..];
        }
    }
}

impl<'ast> Visit<'ast> for References<'_> {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        for attr in &item.attrs {
            self.visit_attribute(attr);
        }
        if let Some((_, items)) = &item.content {
            self.module.push(item.ident.to_string());
            for item in items {
                self.visit_item(item);
            }
            self.module.pop();
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut prefix = Vec::new();
        self.record_use(&mut prefix, &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments: Vec<String> = path
                .segments
                .iter()
                .map(|segment| segment.ident.to_string())
                .collect();
            self.record(&segments);
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.record_tokens(mac.tokens.clone());
        visit::visit_macro(self, mac);
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        if let syn::Meta::NameValue(doc) = &attr.meta
            && doc.path.is_ident("doc")
            && let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(text),
                ..
            }) = &doc.value
        {
            self.record_doc(&text.value());
        }
        visit::visit_attribute(self, attr);
    }
}

/// A directed graph of named nodes; each edge keeps the first reference
/// that made it, to show where a cycle comes from.
#[derive(Default)]
struct Graph {
    edges: BTreeMap<String, BTreeMap<String, String>>,
}

impl Graph {
    fn add(&mut self, from: String, to: String, evidence: String) {
        self.edges.entry(to.clone()).or_default();
        self.edges
            .entry(from)
            .or_default()
            .entry(to)
            .or_insert(evidence);
    }

    /// A cycle, as its nodes in order, if there is one.
    fn cycle(&self) -> Option<Vec<String>> {
        fn visit<'a>(
            graph: &'a Graph,
            node: &'a str,
            done: &mut BTreeSet<&'a str>,
            stack: &mut Vec<&'a str>,
        ) -> Option<Vec<String>> {
            if let Some(at) = stack.iter().position(|on| *on == node) {
                return Some(stack[at..].iter().map(|s| s.to_string()).collect());
            }
            if !done.insert(node) {
                return None;
            }
            stack.push(node);
            for next in graph.edges[node].keys() {
                if let Some(cycle) = visit(graph, next, done, stack) {
                    return Some(cycle);
                }
            }
            stack.pop();
            None
        }
        let mut done = BTreeSet::new();
        self.edges
            .keys()
            .find_map(|node| visit(self, node, &mut done, &mut Vec::new()))
    }

    /// The cycle with the reference behind each of its edges.
    fn explain(&self, cycle: &[String]) -> String {
        let mut text = cycle.join(" -> ");
        text.push_str(&format!(" -> {}\n", cycle[0]));
        for (index, from) in cycle.iter().enumerate() {
            let to = &cycle[(index + 1) % cycle.len()];
            text.push_str(&format!("  {from} -> {to}: {}\n", self.edges[from][to]));
        }
        text
    }

    fn show(&self) -> String {
        self.edges
            .iter()
            .map(|(from, to)| {
                let to: Vec<&str> = to.keys().map(String::as_str).collect();
                format!("  {from} -> {}\n", to.join(", "))
            })
            .collect()
    }
}

fn references() -> Vec<Reference> {
    let parsed = parse_library();
    let known = known_modules(&parsed);
    parsed
        .iter()
        .flat_map(|file| {
            let mut references = References {
                file: &file.file,
                module: file.module.clone(),
                known: &known,
                found: Vec::new(),
            };
            references.visit_file(&file.tree);
            references.found
        })
        .collect()
}

fn evidence(reference: &Reference) -> String {
    let file = reference
        .file
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(&reference.file);
    format!("{} names `{}`", file.display(), reference.spelled)
}

/// The graph of top-level modules.
fn top_level_graph() -> Graph {
    let mut graph = Graph::default();
    for reference in references() {
        let (from, to) = (&reference.from[0], &reference.to[0]);
        graph.edges.entry(from.clone()).or_default();
        if from != to {
            graph.add(from.clone(), to.clone(), evidence(&reference));
        }
    }
    graph
}

/// The graph of `parent`'s children, `parent` itself (its `mod.rs`) one of
/// them.
fn children_graph(parent: &str) -> Graph {
    let node = |module: &ModulePath| module[..module.len().min(2)].join("::");
    let mut graph = Graph::default();
    for reference in references() {
        if reference.from[0] != parent || reference.to[0] != parent {
            continue;
        }
        let (from, to) = (node(&reference.from), node(&reference.to));
        if from != to {
            graph.add(from, to, evidence(&reference));
        }
    }
    graph
}

#[test]
fn top_level_modules_import_each_other_without_a_cycle() {
    let graph = top_level_graph();
    println!("top-level modules and what they import:\n{}", graph.show());
    if let Some(cycle) = graph.cycle() {
        panic!(
            "an import cycle between top-level modules:\n{}",
            graph.explain(&cycle)
        );
    }
}

#[test]
fn the_children_of_chain_and_server_import_each_other_without_a_cycle() {
    for parent in PARENTS_CHECKED {
        let graph = children_graph(parent);
        println!(
            "{parent}'s children and what they import:\n{}",
            graph.show()
        );
        if let Some(cycle) = graph.cycle() {
            panic!(
                "an import cycle between {parent}'s modules:\n{}",
                graph.explain(&cycle)
            );
        }
    }
}

/// The top-level modules docs/architecture.md's module map lists, in its
/// order: each line `- \`name\`…` of the "Module map" section.
fn mapped_modules() -> Vec<String> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .expect("read docs/architecture.md");
    let section = doc
        .split("\n## Module map\n")
        .nth(1)
        .expect("docs/architecture.md has a \"## Module map\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| line.strip_prefix("- `"))
        .filter_map(|line| line.split('`').next())
        .map(|name| name.trim_end_matches('/').to_owned())
        .collect()
}

#[test]
fn the_module_map_lists_every_module_after_what_it_imports() {
    let graph = top_level_graph();
    let mapped = mapped_modules();
    let modules: BTreeSet<&String> = graph.edges.keys().collect();
    let listed: BTreeSet<&String> = mapped.iter().collect();
    assert_eq!(
        listed, modules,
        "docs/architecture.md's module map (left) and src/'s top-level modules (right) differ"
    );
    for (position, module) in mapped.iter().enumerate() {
        for imported in graph.edges[module].keys() {
            let at = mapped.iter().position(|m| m == imported);
            assert!(
                at.is_some_and(|at| at < position),
                "the module map lists `{module}` before `{imported}`, which it imports ({})",
                graph.edges[module][imported]
            );
        }
    }
}
