//! Each server's director (kube's `APIServerHandler.director`): API routes
//! first, then the non-API mux (exact paths, then prefixes, longest first),
//! and whatever matches nothing goes to the next server of the delegation
//! chain.
//!
//! A path belongs to an API root as [`api_root_matches`] says (kube's rule,
//! which the manifest's `api` routes are defined by).

use std::collections::HashMap;

use futures_util::future::BoxFuture;

use crate::body::{Request, Response};
use crate::config::{RouteMatch, api_root_matches};
use crate::handler::{Handler, SharedHandler};

pub(crate) struct Director {
    routes: RouteTable<SharedHandler>,
    /// The next server of the delegation chain, or the not-found end.
    delegate: SharedHandler,
}

/// The routes of one server, gathered before the director is built.
pub(crate) struct Routes<T = SharedHandler> {
    pub api: Vec<(String, T)>,
    pub exact: Vec<(String, T)>,
    pub prefixes: Vec<(String, T)>,
}

impl<T> Routes<T> {
    /// A route of the manifest's kind, leading to `target`.
    pub(crate) fn add(&mut self, matcher: &RouteMatch, target: T) {
        match matcher {
            RouteMatch::Api(root) => self.api.push((root.clone(), target)),
            RouteMatch::Exact(path) => self.exact.push((path.clone(), target)),
            RouteMatch::Prefix(prefix) => self.prefixes.push((prefix.clone(), target)),
        }
    }
}

impl<T> Default for Routes<T> {
    fn default() -> Self {
        Routes {
            api: Vec::new(),
            exact: Vec::new(),
            prefixes: Vec::new(),
        }
    }
}

/// One server's routes in the order the director tries them, each leading
/// to a `T`: a handler for the director, or what else must be known of the
/// route a path reaches (the canonical request target asks whether it keeps
/// escaped slashes).
pub(crate) struct RouteTable<T> {
    /// API roots, longest first so a version root wins over its group root.
    api: Vec<(String, T)>,
    exact: HashMap<String, T>,
    /// Prefixes, longest first.
    prefixes: Vec<(String, T)>,
}

impl<T> RouteTable<T> {
    pub(crate) fn new(routes: Routes<T>) -> Self {
        let Routes {
            mut api,
            exact,
            mut prefixes,
        } = routes;
        api.sort_by_key(|(root, _)| std::cmp::Reverse(root.len()));
        prefixes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        // The first registration of an exact path wins, like the mux it models.
        let mut exact_map = HashMap::with_capacity(exact.len());
        for (path, target) in exact {
            exact_map.entry(path).or_insert(target);
        }
        RouteTable {
            api,
            exact: exact_map,
            prefixes,
        }
    }

    /// What the route of `path` leads to, if a route takes it.
    pub(crate) fn route(&self, path: &str) -> Option<&T> {
        if let Some((_, target)) = self
            .api
            .iter()
            .find(|(root, _)| api_root_matches(root, path))
        {
            return Some(target);
        }
        if let Some(target) = self.exact.get(path) {
            return Some(target);
        }
        self.prefixes
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix.as_str()))
            .map(|(_, target)| target)
    }
}

/// The routes of every server of the delegation chain, in its order: a
/// path is taken by the route of the first server with one for it, as each
/// director hands what it does not take to the next. What asks where the
/// chain sends a path (the canonical target, discovery, the built-in
/// endpoints that stand aside) asks here.
pub(crate) struct ChainTable<T>(Vec<RouteTable<T>>);

impl<T> ChainTable<T> {
    pub(crate) fn new(servers: impl IntoIterator<Item = Routes<T>>) -> Self {
        ChainTable(servers.into_iter().map(RouteTable::new).collect())
    }

    /// What the route the chain sends `path` to leads to, if any takes it.
    pub(crate) fn route(&self, path: &str) -> Option<&T> {
        self.0.iter().find_map(|table| table.route(path))
    }
}

impl Director {
    pub(crate) fn new(routes: Routes, delegate: SharedHandler) -> Self {
        Director {
            routes: RouteTable::new(routes),
            delegate,
        }
    }
}

impl Handler for Director {
    fn call(&self, request: Request) -> BoxFuture<'_, Response> {
        let handler = self
            .routes
            .route(request.uri().path())
            .unwrap_or(&self.delegate);
        handler.call(request)
    }
}
