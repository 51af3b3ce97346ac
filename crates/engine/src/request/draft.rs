//! What a request drafts, decided once when the engine accepts it: which drafters, the heads'
//! tree, the most tokens per step and whether they are drafted in full whatever they cost. The
//! scheduler builds the drafters from it and the history records its tree; nothing downstream
//! decides it again.

use serde::Serialize;

use crate::error::EngineError;
use crate::medusa::plan::{MedusaPlan, TreeOrigin};
use crate::request::{DraftPolicy, GenerateRequest, GenerationMode, MAX_DRAFT_TOKENS};
use crate::speculative::tree::TreeSpec;

/// Most drafted tokens per step when the request does not say; the draft budget (measured
/// decode costs, acceptance learnt during the run) usually drafts fewer.
pub(crate) const DEFAULT_MAX_DRAFT_TOKENS: usize = 16;

/// A request's draft, as decided.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestDraft {
    /// What the request asked for, with the default tree and `tuned` made into the tree they
    /// name.
    pub policy: DraftPolicy,
    /// Lookup drafts continuations of earlier text.
    pub lookup: bool,
    /// The heads draft from this tree; none when they do not draft.
    pub tree: Option<TreeSpec>,
    /// The draft model drafts a chain.
    pub draft_model: bool,
    /// The feature drafter grows a tree.
    pub eagle: bool,
    /// Most tokens drafted per step.
    pub max_draft: usize,
    /// Draft all the drafters have at every step whatever it costs, instead of what the budget
    /// expects to pay.
    pub fixed: bool,
}

/// The heads loaded here, as a request's draft is decided from them.
#[derive(Clone, Copy)]
pub(crate) struct LoadedHeads<'a> {
    pub(crate) head_count: usize,
    pub(crate) plan: &'a MedusaPlan,
}

impl RequestDraft {
    /// Decodes plainly.
    fn plain(policy: DraftPolicy) -> Self {
        Self {
            policy,
            lookup: false,
            tree: None,
            draft_model: false,
            eagle: false,
            max_draft: 0,
            fixed: false,
        }
    }

    /// The drafters do not propose anything.
    pub fn is_plain(&self) -> bool {
        !self.lookup && self.tree.is_none() && !self.draft_model && !self.eagle
    }

    /// What `request` drafts on an engine with `heads` (none without) and, when
    /// `draft_model`, a draft model, when `eagle`, a feature drafter. `default_tree`: the tree
    /// a Medusa request drafting `auto` drafts instead (set in Settings), if any. Refuses
    /// Medusa mode and named trees without heads, draft and eagle modes without their drafter,
    /// trees deeper than the heads, and `tuned` where no tree was tuned.
    pub(crate) fn resolve(
        request: &GenerateRequest,
        heads: Option<LoadedHeads<'_>>,
        default_tree: Option<&DraftPolicy>,
        draft_model: bool,
        eagle: bool,
    ) -> Result<Self, EngineError> {
        let mode = request.mode;
        if mode == GenerationMode::Draft && !draft_model {
            return Err(EngineError::NoDraftModel);
        }
        if mode == GenerationMode::Eagle && !eagle {
            return Err(EngineError::NoEagleDrafter);
        }
        let mut draft = Self::resolve_drafters(request, heads, default_tree)?;
        // The draft model and the feature drafter draft in their own modes, and in auto beside
        // lookup and the heads (the budget weighs each); a named tree in auto is drafted in
        // full beside them.
        draft.draft_model =
            draft_model && matches!(mode, GenerationMode::Draft | GenerationMode::Auto);
        draft.eagle = eagle && matches!(mode, GenerationMode::Eagle | GenerationMode::Auto);
        Ok(draft)
    }

    fn resolve_drafters(
        request: &GenerateRequest,
        heads: Option<LoadedHeads<'_>>,
        default_tree: Option<&DraftPolicy>,
    ) -> Result<Self, EngineError> {
        let mode = request.mode;
        let mut policy = request.draft.clone();
        if let (GenerationMode::Medusa, DraftPolicy::Auto, Some(default)) =
            (mode, &policy, default_tree)
        {
            policy = default.clone();
        }
        // Auto mode drafts with lookup alone without heads, unless it names a tree.
        let needs_heads = mode == GenerationMode::Medusa
            || (mode == GenerationMode::Auto && policy != DraftPolicy::Auto);
        if needs_heads && heads.is_none() {
            return Err(EngineError::NoMedusaHeads);
        }
        if let Some(heads) = heads.filter(|_| needs_heads) {
            if policy == DraftPolicy::Tuned {
                policy = DraftPolicy::Tree(tuned_tree(heads.plan)?);
            }
            if let DraftPolicy::Tree(tree) = &policy {
                tree.check_heads(heads.head_count)
                    .map_err(|e| EngineError::InvalidParameter {
                        name: "tree",
                        message: e.to_string(),
                    })?;
            }
        }
        let plan = heads.map(|h| h.plan);
        let draft = |lookup: bool, tree: Option<&TreeSpec>, max_draft: usize, fixed: bool| {
            // A fixed draft is all of it; otherwise the request may lower or raise the cap.
            let max_draft = if fixed {
                max_draft
            } else {
                request.max_draft_tokens.unwrap_or(max_draft)
            };
            Self {
                policy: policy.clone(),
                lookup,
                tree: tree.cloned(),
                draft_model: false,
                eagle: false,
                max_draft: max_draft.min(MAX_DRAFT_TOKENS),
                fixed,
            }
        };
        Ok(match (mode, &policy, plan) {
            (GenerationMode::Normal, _, _) | (GenerationMode::Medusa, _, None) => {
                Self::plain(policy.clone())
            }
            (GenerationMode::Lookup, DraftPolicy::Length(n), _) => draft(true, None, *n, true),
            (GenerationMode::Lookup, _, _) => draft(true, None, DEFAULT_MAX_DRAFT_TOKENS, false),
            // The draft model's chain: `n` tokens at every step, or what the budget expects
            // to pay (the flag is set by `resolve`).
            (GenerationMode::Draft, DraftPolicy::Length(n), _) => draft(false, None, *n, true),
            (GenerationMode::Draft, _, _) => draft(false, None, DEFAULT_MAX_DRAFT_TOKENS, false),
            // The feature drafter's tree, grown by its confidence: `n` tokens at every step, or
            // what the budget expects to pay (the flag is set by `resolve`).
            (GenerationMode::Eagle, DraftPolicy::Length(n), _) => draft(false, None, *n, true),
            (GenerationMode::Eagle, _, _) => draft(false, None, DEFAULT_MAX_DRAFT_TOKENS, false),
            (GenerationMode::Medusa, DraftPolicy::Tree(tree), Some(_)) => {
                draft(false, Some(tree), tree.len(), true)
            }
            // The plan's tree. A tuned one drafts as far as the budget expects it to pay; one
            // given at load, or stored with heads that record no accuracy to plan from, is
            // drafted in full (the budget would have no evidence to draft on).
            (GenerationMode::Medusa, _, Some(plan)) => match &plan.tree {
                Some(tree) => draft(
                    false,
                    Some(tree),
                    plan.default_max_draft(DEFAULT_MAX_DRAFT_TOKENS),
                    plan.origin != TreeOrigin::Tuned,
                ),
                // No tree pays on this machine: Medusa mode decodes plainly.
                None => Self::plain(policy.clone()),
            },
            (GenerationMode::Auto, _, Some(plan)) => match (&policy, plan) {
                // A named tree (or one given at load) beside lookup's whole continuation, both
                // in full at every step.
                (DraftPolicy::Tree(tree), _)
                | (
                    _,
                    MedusaPlan {
                        origin: TreeOrigin::Given,
                        tree: Some(tree),
                        ..
                    },
                ) => draft(
                    true,
                    Some(tree),
                    tree.len() + DEFAULT_MAX_DRAFT_TOKENS,
                    true,
                ),
                // Lookup first: its guesses cost nothing to make, and the budget weighs how
                // much of the heads' tree to add where lookup would miss. Where the tuner found
                // that no tree pays on this machine, lookup drafts alone.
                _ => match &plan.tree {
                    Some(tree) => draft(
                        true,
                        Some(tree),
                        tree.len().max(DEFAULT_MAX_DRAFT_TOKENS),
                        false,
                    ),
                    None => draft(true, None, DEFAULT_MAX_DRAFT_TOKENS, false),
                },
            },
            (GenerationMode::Auto, _, None) => draft(true, None, DEFAULT_MAX_DRAFT_TOKENS, false),
        })
    }
}

/// The tree `tuned` names: the fastest the tuner predicted for these heads on this machine.
fn tuned_tree(plan: &MedusaPlan) -> Result<TreeSpec, EngineError> {
    plan.tuned_tree
        .clone()
        .ok_or_else(|| EngineError::InvalidParameter {
            name: "tree",
            message: "there is no tuned tree: these heads record no held-out accuracy to size \
                      one from, or a tree was given at load"
                .into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Prompt;

    fn plan(origin: TreeOrigin, tree: Option<TreeSpec>, tuned: Option<TreeSpec>) -> MedusaPlan {
        MedusaPlan {
            origin,
            tree,
            expected_tokens_per_step: None,
            predicted_speedup: None,
            decision: String::new(),
            forecasts: Vec::new(),
            tuned_tree: tuned,
            decode_costs: None,
        }
    }

    fn request(mode: GenerationMode, draft: DraftPolicy) -> GenerateRequest {
        GenerateRequest::new(Prompt::Text("x".into()), 4)
            .with_mode(mode)
            .with_draft(draft)
    }

    fn heads(plan: &MedusaPlan) -> Option<LoadedHeads<'_>> {
        Some(LoadedHeads {
            head_count: 4,
            plan,
        })
    }

    #[test]
    fn normal_decodes_plainly_and_lookup_drafts_its_length_or_what_pays() {
        let normal = RequestDraft::resolve(
            &request(GenerationMode::Normal, DraftPolicy::Auto),
            None,
            None,
            false,
            false,
        )
        .unwrap();
        assert!(normal.is_plain());
        assert_eq!(normal.max_draft, 0);

        let fixed = RequestDraft::resolve(
            &request(GenerationMode::Lookup, DraftPolicy::Length(5)),
            None,
            None,
            false,
            false,
        )
        .unwrap();
        assert_eq!(
            (fixed.lookup, fixed.tree, fixed.max_draft, fixed.fixed),
            (true, None, 5, true)
        );

        let mut capped = request(GenerationMode::Lookup, DraftPolicy::Auto);
        capped.max_draft_tokens = Some(4);
        let capped = RequestDraft::resolve(&capped, None, None, false, false).unwrap();
        assert_eq!((capped.max_draft, capped.fixed), (4, false));
    }

    #[test]
    fn medusa_drafts_the_plan_s_tree_the_default_tree_or_the_tuned_one() {
        let tuned = plan(
            TreeOrigin::Tuned,
            Some(TreeSpec::chain(3)),
            Some(TreeSpec::chain(4)),
        );
        let by_plan = RequestDraft::resolve(
            &request(GenerationMode::Medusa, DraftPolicy::Auto),
            heads(&tuned),
            None,
            false,
            false,
        )
        .unwrap();
        assert_eq!(by_plan.tree, Some(TreeSpec::chain(3)));
        assert_eq!(
            (by_plan.lookup, by_plan.fixed, by_plan.max_draft),
            (false, false, 3)
        );

        let default = DraftPolicy::Tree(TreeSpec::chain(2));
        let by_default = RequestDraft::resolve(
            &request(GenerationMode::Medusa, DraftPolicy::Auto),
            heads(&tuned),
            Some(&default),
            false,
            false,
        )
        .unwrap();
        assert_eq!(by_default.policy, default);
        assert_eq!(by_default.tree, Some(TreeSpec::chain(2)));
        assert!(by_default.fixed);

        // A request's own tree wins over the default.
        let named = RequestDraft::resolve(
            &request(GenerationMode::Medusa, DraftPolicy::Tuned),
            heads(&tuned),
            Some(&default),
            false,
            false,
        )
        .unwrap();
        assert_eq!(named.policy, DraftPolicy::Tree(TreeSpec::chain(4)));
        assert_eq!((named.tree, named.max_draft), (Some(TreeSpec::chain(4)), 4));

        // No tree pays here: Medusa mode decodes plainly.
        let none = plan(TreeOrigin::Tuned, None, None);
        let plain = RequestDraft::resolve(
            &request(GenerationMode::Medusa, DraftPolicy::Auto),
            heads(&none),
            None,
            false,
            false,
        )
        .unwrap();
        assert!(plain.is_plain());
    }

    #[test]
    fn auto_adds_the_heads_tree_to_lookup_and_drafts_a_given_or_named_tree_in_full() {
        let tuned = plan(TreeOrigin::Tuned, Some(TreeSpec::chain(3)), None);
        let both = RequestDraft::resolve(
            &request(GenerationMode::Auto, DraftPolicy::Auto),
            heads(&tuned),
            None,
            false,
            false,
        )
        .unwrap();
        assert_eq!(
            (both.lookup, both.tree.clone(), both.max_draft, both.fixed),
            (
                true,
                Some(TreeSpec::chain(3)),
                DEFAULT_MAX_DRAFT_TOKENS,
                false
            )
        );
        // The Settings default is Medusa mode's only.
        let default = DraftPolicy::Tree(TreeSpec::chain(2));
        let still = RequestDraft::resolve(
            &request(GenerationMode::Auto, DraftPolicy::Auto),
            heads(&tuned),
            Some(&default),
            false,
            false,
        )
        .unwrap();
        assert_eq!(still, both);

        let given = plan(TreeOrigin::Given, Some(TreeSpec::chain(2)), None);
        let full = RequestDraft::resolve(
            &request(GenerationMode::Auto, DraftPolicy::Auto),
            heads(&given),
            None,
            false,
            false,
        )
        .unwrap();
        assert_eq!(
            (full.lookup, full.max_draft, full.fixed),
            (true, 2 + DEFAULT_MAX_DRAFT_TOKENS, true)
        );

        let lookup_only = RequestDraft::resolve(
            &request(GenerationMode::Auto, DraftPolicy::Auto),
            None,
            None,
            false,
            false,
        )
        .unwrap();
        assert_eq!((lookup_only.lookup, lookup_only.tree), (true, None));
    }

    #[test]
    fn trees_need_heads_deep_enough_and_tuned_needs_a_tuned_tree() {
        let tree = DraftPolicy::Tree(TreeSpec::chain(3));
        for mode in [GenerationMode::Medusa, GenerationMode::Auto] {
            let err = RequestDraft::resolve(&request(mode, tree.clone()), None, None, false, false)
                .unwrap_err();
            assert_eq!(err, EngineError::NoMedusaHeads, "{mode}");
        }
        let shallow = plan(TreeOrigin::Tuned, None, None);
        let two_heads = Some(LoadedHeads {
            head_count: 2,
            plan: &shallow,
        });
        let err = RequestDraft::resolve(
            &request(GenerationMode::Medusa, tree),
            two_heads,
            None,
            false,
            false,
        )
        .unwrap_err();
        assert!(matches!(
            err,
            EngineError::InvalidParameter { name: "tree", .. }
        ));
        let err = RequestDraft::resolve(
            &request(GenerationMode::Medusa, DraftPolicy::Tuned),
            two_heads,
            None,
            false,
            false,
        )
        .unwrap_err();
        assert!(
            matches!(&err, EngineError::InvalidParameter { message, .. } if message.contains("no tuned tree")),
            "{err}"
        );
    }
}
