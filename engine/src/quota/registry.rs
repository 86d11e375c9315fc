//! The rule registry and its one resolver, `(scope, method, path) → rule`.
//!
//! Precedence, first match wins (disabled rules are skipped as if absent):
//!
//! 1. exact method + exact path,
//! 2. exact path, any method,
//! 3. the most specific matching template (more literal segments, then more
//!    `{param}` segments than `*`, then more segments, then a rule naming the
//!    method over one that does not, then the smaller id),
//! 4. the scope's default (no path; one naming the method beats one that does not),
//! 5. the global default (scope `*`).
//!
//! Nothing matched is `None`, which the limiter turns into a refusal with
//! reason `no_rule`: a request is never silently unlimited.
//!
//! Templates: `{name}` matches exactly one segment; `*` matches one segment,
//! or, as the last segment, one or more remaining segments.

use std::collections::HashMap;
use std::sync::Arc;

use super::rule::{Rule, RuleId, GLOBAL_SCOPE};

/// An immutable set of rules, indexed by scope. The limiter holds it behind an
/// `ArcSwap` and replaces it whole on reload.
#[derive(Debug, Default, Clone)]
pub struct RuleRegistry {
    by_scope: HashMap<String, Vec<Arc<Rule>>>,
    by_id: HashMap<RuleId, Arc<Rule>>,
    /// The database version the set was loaded at (0 for hand-built sets).
    pub version: i64,
}

impl RuleRegistry {
    pub fn new(rules: impl IntoIterator<Item = Rule>) -> RuleRegistry {
        let mut reg = RuleRegistry::default();
        for rule in rules {
            let rule = Arc::new(rule);
            reg.by_id.insert(rule.id.clone(), rule.clone());
            reg.by_scope.entry(rule.scope.clone()).or_default().push(rule);
        }
        reg
    }

    pub fn with_version(mut self, version: i64) -> RuleRegistry {
        self.version = version;
        self
    }

    pub fn get(&self, id: &RuleId) -> Option<&Arc<Rule>> {
        self.by_id.get(id)
    }

    pub fn rules(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.by_id.values()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The rule that governs a request, by the documented precedence.
    pub fn resolve(&self, scope: &str, method: &str, path: &str) -> Option<&Arc<Rule>> {
        let path = path.split(['?', '#']).next().unwrap_or(path);
        let method_is = |r: &Rule| r.method.as_deref().is_some_and(|m| m.eq_ignore_ascii_case(method));
        if let Some(rules) = self.by_scope.get(scope) {
            let live = || rules.iter().filter(|r| r.enabled);
            let exact = |r: &&Arc<Rule>| r.path.as_deref() == Some(path) && !is_template(path);
            if let Some(r) = live().filter(exact).find(|r| method_is(r)) {
                return Some(r);
            }
            if let Some(r) = live().filter(exact).find(|r| r.method.is_none()) {
                return Some(r);
            }
            let best_template = live()
                .filter(|r| r.method.is_none() || method_is(r))
                .filter_map(|r| {
                    let tmpl = r.path.as_deref().filter(|p| is_template(p))?;
                    let spec = specificity(tmpl, path)?;
                    Some(((spec, r.method.is_some()), r))
                })
                .max_by(|(a, ra), (b, rb)| a.cmp(b).then_with(|| rb.id.cmp(&ra.id)));
            if let Some((_, r)) = best_template {
                return Some(r);
            }
            if let Some(r) = live().filter(|r| r.path.is_none()).find(|r| method_is(r)) {
                return Some(r);
            }
            if let Some(r) = live().find(|r| r.path.is_none() && r.method.is_none()) {
                return Some(r);
            }
        }
        self.by_scope.get(GLOBAL_SCOPE)?.iter().find(|r| r.enabled && r.path.is_none() && r.method.is_none())
    }
}

fn is_template(path: &str) -> bool {
    path.split('/').any(|s| s == "*" || (s.starts_with('{') && s.ends_with('}')))
}

/// `Some((literal segments, param segments, total segments))` when `template`
/// matches `path`, `None` otherwise. Larger tuples are more specific.
fn specificity(template: &str, path: &str) -> Option<(usize, usize, usize)> {
    let t: Vec<&str> = template.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    let (mut literal, mut params) = (0, 0);
    for (i, seg) in t.iter().enumerate() {
        let last = i + 1 == t.len();
        match *seg {
            "*" if last => {
                return (p.len() > i && p[i..].iter().all(|s| !s.is_empty())).then_some((literal, params, t.len()));
            }
            "*" => {}
            s if s.starts_with('{') && s.ends_with('}') => params += 1,
            s => {
                if p.get(i) != Some(&s) {
                    return None;
                }
                literal += 1;
                continue;
            }
        }
        if p.get(i).is_none_or(|s| s.is_empty()) {
            return None;
        }
    }
    (t.len() == p.len()).then_some((literal, params, t.len()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::quota::rule::Limit;

    fn r(id: &str, scope: &str, method: Option<&str>, path: Option<&str>) -> Rule {
        Rule::new(scope, method, path, Limit::token_bucket(1, Duration::from_secs(1), 1)).with_id(id)
    }

    fn registry() -> RuleRegistry {
        RuleRegistry::new([
            r("global", "*", None, None),
            r("scope_default", "pricing", None, None),
            r("scope_put", "pricing", Some("PUT"), None),
            r("exact_put", "pricing", Some("PUT"), Some("/prices/42")),
            r("exact_any", "pricing", None, Some("/prices/42")),
            r("tmpl_sku", "pricing", None, Some("/prices/{sku}")),
            r("tmpl_star", "pricing", None, Some("/prices/*")),
            r("tmpl_deep", "pricing", None, Some("/prices/{sku}/fixed/*")),
        ])
    }

    fn resolved(reg: &RuleRegistry, scope: &str, method: &str, path: &str) -> Option<String> {
        reg.resolve(scope, method, path).map(|r| r.id.0.clone())
    }

    #[test]
    fn resolution_follows_the_documented_precedence() {
        let reg = registry();
        assert_eq!(resolved(&reg, "pricing", "PUT", "/prices/42").as_deref(), Some("exact_put"));
        assert_eq!(resolved(&reg, "pricing", "GET", "/prices/42?x=1").as_deref(), Some("exact_any"));
        assert_eq!(resolved(&reg, "pricing", "GET", "/prices/7").as_deref(), Some("tmpl_sku"));
        assert_eq!(resolved(&reg, "pricing", "GET", "/prices/7/fixed/a/b").as_deref(), Some("tmpl_deep"));
        assert_eq!(resolved(&reg, "pricing", "GET", "/prices/7/other").as_deref(), Some("tmpl_star"));
        assert_eq!(resolved(&reg, "pricing", "GET", "/other/7").as_deref(), Some("scope_default"));
        assert_eq!(resolved(&reg, "pricing", "put", "/orders").as_deref(), Some("scope_put"));
        assert_eq!(resolved(&reg, "content", "GET", "/cards").as_deref(), Some("global"));
    }

    #[test]
    fn a_request_matching_nothing_resolves_to_no_rule() {
        let reg = RuleRegistry::new([r("only", "pricing", None, Some("/prices"))]);
        assert_eq!(resolved(&reg, "pricing", "GET", "/other"), None);
        assert_eq!(resolved(&reg, "content", "GET", "/prices"), None);
    }

    #[test]
    fn disabled_rules_are_skipped() {
        let mut exact = r("exact", "pricing", None, Some("/p"));
        exact.enabled = false;
        let reg = RuleRegistry::new([exact, r("default", "pricing", None, None)]);
        assert_eq!(resolved(&reg, "pricing", "GET", "/p").as_deref(), Some("default"));
    }

    #[test]
    fn templates_match_whole_segments_only() {
        assert_eq!(specificity("/a/{b}", "/a/1"), Some((2, 1, 3)));
        assert_eq!(specificity("/a/{b}", "/a/1/2"), None);
        assert_eq!(specificity("/a/{b}", "/a/"), None);
        assert_eq!(specificity("/a/*", "/a/1/2"), Some((2, 0, 3)));
        assert_eq!(specificity("/a/*/c", "/a/1/c"), Some((3, 0, 4)));
        assert_eq!(specificity("/a/*/c", "/a/1/d"), None);
    }
}
