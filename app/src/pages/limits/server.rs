//! The Limits pages' server side (ssr only): the form as typed becomes an
//! engine draft, every invalid field named at once, and writes go through
//! the engine's `RuleAdmin`.

use std::time::Duration;

use sluice_engine::audit;
use sluice_engine::quota::admin::{RuleAdmin, RuleAdminError};
use sluice_engine::quota::{Rule, RuleDraft, RuleHistoryEntry, RulesRepoError};

use super::*;
use crate::format;
use crate::model::FieldError;
use crate::ssr::{internal, AppContext};

pub fn row(rule: &Rule) -> RuleRow {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    RuleRow {
        id: rule.id.to_string(),
        scope: rule.scope.clone(),
        method: rule.method.clone(),
        path: rule.path.clone(),
        algorithm: rule.limit.algorithm.as_str().to_owned(),
        tokens: rule.limit.tokens,
        interval_ms: ms(rule.limit.interval),
        burst: rule.limit.burst,
        concurrency: rule.concurrency,
        max_wait_ms: rule.max_wait.map(ms),
        min_penalty_ms: rule.min_penalty.map(ms),
        wait_ceiling_ms: ms(rule.wait_ceiling(None)),
        shadow: rule.shadow,
        enabled: rule.enabled,
        note: rule.note.clone(),
        updated_by: rule.updated_by.clone(),
        updated_at: rule.updated_at.as_millis(),
    }
}

pub fn admin(ctx: &AppContext) -> RuleAdmin {
    RuleAdmin::new(ctx.rules.clone(), ctx.limiter.clone())
}


/// The form as typed → a draft, or the fields that are not even numbers.
#[allow(clippy::too_many_arguments)]
pub fn draft(form: RuleForm) -> Result<RuleDraft, Vec<FieldError>> {
    let mut errors = Vec::new();
    let blank = |s: &str| s.trim().is_empty();
    let mut count = |field: &str, text: &str, optional: bool| -> Option<u32> {
        if optional && blank(text) {
            return None;
        }
        match text.trim().parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) if blank(text) => {
                errors.push(FieldError::new(field, "required"));
                None
            }
            Err(_) => {
                errors.push(FieldError::new(field, format!("'{}' is not a whole number", text.trim())));
                None
            }
        }
    };
    let tokens = count("tokens", &form.tokens, false);
    let burst = count("burst", &form.burst, true);
    let concurrency = count("concurrency", &form.concurrency, true);
    let mut duration = |field: &str, text: &str, optional: bool| -> Option<Duration> {
        if blank(text) {
            if !optional {
                errors.push(FieldError::new(field, "required, e.g. 10s or 1m"));
            }
            return None;
        }
        match format::parse_duration_input(text) {
            Ok(ms) => Some(Duration::from_millis(ms)),
            Err(message) => {
                errors.push(FieldError::new(field, message));
                None
            }
        }
    };
    let interval = duration("interval", &form.interval, false);
    let max_wait = duration("max_wait", &form.max_wait, true);
    let min_penalty = duration("min_penalty", &form.min_penalty, true);
    let some = |s: String| Some(s).filter(|s| !s.trim().is_empty());
    let draft = RuleDraft {
        scope: form.scope,
        method: some(form.method),
        path: some(form.path),
        algorithm: some(form.algorithm),
        tokens: tokens.unwrap_or(1),
        interval: interval.unwrap_or(Duration::from_secs(1)),
        burst,
        concurrency,
        max_wait,
        min_penalty,
        shadow: form.shadow.is_some(),
        enabled: form.enabled.is_some(),
        note: form.note,
    };
    // The engine's checks run too, so one submit shows every problem.
    if let Err(engine) = draft.clone().into_rule(sluice_engine::quota::RuleId(String::new())) {
        for e in engine {
            if !errors.iter().any(|f| f.field == e.field()) {
                errors.push(FieldError::new(e.field(), e.message()));
            }
        }
    }
    if errors.is_empty() {
        Ok(draft)
    } else {
        Err(errors)
    }
}

pub fn saved(result: Result<Rule, RuleAdminError>) -> Result<Saved, ServerFnError> {
    match result {
        Ok(rule) => Ok(Saved::Ok(row(&rule))),
        Err(RuleAdminError::Invalid(errors)) => {
            Ok(Saved::Invalid(errors.iter().map(|e| FieldError::new(e.field(), e.message())).collect()))
        }
        Err(e @ RuleAdminError::Conflict) => Ok(Saved::Invalid(vec![FieldError::new("path", e.to_string())])),
        Err(e @ RuleAdminError::NotFound(_)) => Err(ServerFnError::new(e.to_string())),
        Err(e) => Err(internal("saving the limit rule", e)),
    }
}

pub fn history_row(entry: RuleHistoryEntry) -> HistoryRow {
    let json = |r: &Option<Rule>| r.as_ref().and_then(|r| serde_json::to_value(r).ok());
    let changes = audit::diff(json(&entry.before).as_ref(), json(&entry.after).as_ref());
    HistoryRow {
        at_ms: entry.at_ms,
        actor: entry.actor,
        action: entry.action,
        changes: changes.into_iter().map(crate::pages::audit::change_row).collect(),
    }
}

pub fn repo_error(what: &str, e: RulesRepoError) -> ServerFnError {
    internal(what, e)
}
