//! Whether drafting can pay for the loaded model on this machine, in plain words, from the
//! decode costs measured here: what an extra token in a decode costs, what a bigger model
//! would change, and whether the model's weight format has CPU kernels that batch.

use serde::Serialize;
use ts_rs::TS;

use super::costs::{CostModel, CostPoint, CostSource};
use crate::cpu_kernel_choice::CpuKernels;

/// How an extra token in a decode is priced here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum CostRegime {
    /// Each token is computed at nearly full price: 2 tokens cost 1.6x one or more.
    ComputeBound,
    /// An extra token costs part of a decode.
    Between,
    /// Reading the weights dominates: 2 tokens cost 1.25x one or less.
    MemoryBound,
}

/// Why drafting does or does not pay for the loaded model here.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct DraftingOutlook {
    /// Decode time of 2 tokens in one batch, in decodes of one token.
    pub two_tokens: f64,
    /// The same for 4 tokens.
    pub four_tokens: f64,
    pub regime: CostRegime,
    /// How often a single drafted token must be accepted to pay for itself (0..1).
    pub break_even_acceptance: f64,
    /// The physics here, in plain words.
    pub explanation: String,
    /// What a bigger model would change, from the widened default model's costs where they
    /// were measured here.
    pub model_size: String,
    /// A weight format whose CPU kernels batch where the loaded one's do not, to convert to
    /// (`medusa quantize --type`, or Settings).
    pub better_format: Option<String>,
    /// Why that format, in plain words.
    pub format_note: Option<String>,
}

/// A widened model's costs measured on this machine (`medusa scale-model`).
#[derive(Debug, Clone)]
pub struct WidenedCosts {
    pub file_name: String,
    pub file_bytes: u64,
    pub points: Vec<CostPoint>,
}

/// Above this price of a second token the machine computes each token (compute-bound).
const COMPUTE_BOUND: f64 = 1.6;
/// Below it, extra tokens are nearly free (memory-bound).
const MEMORY_BOUND: f64 = 1.25;

/// The format suggested for the CPU's batched kernels. llama.cpp repacks IQ4_NL and Q4_0 at
/// load for the same AVX2 kernels; IQ4_NL keeps more of a model's choices (measured on the
/// default model, docs/BENCHMARKS.md "Weight formats").
const FORMAT_THAT_BATCHES: &str = "IQ4_NL";

/// Weight formats llama.cpp does not repack for the CPU's batched kernels, what converting to
/// [`FORMAT_THAT_BATCHES`] changes in size, and whether they are quantized already (converting
/// then quantizes twice).
const FORMATS_NOT_REPACKED: &[(&str, &str, bool)] = &[
    ("Q4_1", "of about the same size", true),
    ("Q5_0", "a little smaller", true),
    ("Q5_1", "a little smaller", true),
    (
        "F16",
        "a quarter of the size, at some loss of precision",
        false,
    ),
    (
        "BF16",
        "a quarter of the size, at some loss of precision",
        false,
    ),
    (
        "F32",
        "an eighth of the size, at some loss of precision",
        false,
    ),
];

/// Weight formats this repository's patch to ggml batches ([`CpuKernels::Batched`]).
const BATCHED_BY_PATCH: &[&str] = &["Q4_1"];

/// The format to convert `file_type` weights to for the CPU's batched kernels, and why, in
/// plain words; `None` for formats that have them, with the `kernels` in effect.
pub fn format_that_batches(file_type: &str, kernels: CpuKernels) -> Option<(&'static str, String)> {
    let batched = |format: &str| format.eq_ignore_ascii_case(file_type);
    if kernels.is_batched() && BATCHED_BY_PATCH.iter().any(|f| batched(f)) {
        return None;
    }
    let (from, size, quantized) = FORMATS_NOT_REPACKED
        .iter()
        .find(|(from, _, _)| batched(from))?;
    let to = FORMAT_THAT_BATCHES;
    let precision = if *quantized {
        format!(
            " Converting quantizes the weights a second time, which costs precision (the default model's {to} copy of its Q4_1 file picks another next token than the original at about 1 place in 5); where the model is published in {to} or Q4_0, that file keeps more."
        )
    } else {
        String::new()
    };
    Some((
        to,
        format!(
            "{from} weights are not repacked for the CPU's batched kernels in llama.cpp; {to}, {size}, is, so each decode costs less with it, most of all a decode of several tokens.{precision} Convert with `medusa quantize --type {}` or in Settings (the new file is kept beside this one).",
            to.to_ascii_lowercase()
        ),
    ))
}

/// The outlook from decode costs measured here (`points`), the model's weight format
/// (`file_type`, e.g. "Q4_1"), whether it runs on a GPU, the CPU kernels in effect, and a widened
/// model's costs if any were measured here. `None` without a figure for one token.
pub fn drafting_outlook(
    points: &[CostPoint],
    file_type: &str,
    on_gpu: bool,
    kernels: CpuKernels,
    widened: Option<&WidenedCosts>,
) -> Option<DraftingOutlook> {
    let (two_tokens, four_tokens) = relative_costs(points)?;
    let regime = regime_of(two_tokens);
    let break_even_acceptance = (two_tokens - 1.0).clamp(0.0, 1.0);
    let device = if on_gpu { "GPU" } else { "CPU" };
    let prices = format!(
        "Here a decode of 2 tokens costs {two_tokens:.2}x one, and 4 cost {four_tokens:.2}x"
    );
    let pays_at = format!(
        "a drafted token pays only if it is accepted more than {:.0}% of the time",
        break_even_acceptance * 100.0
    );
    let explanation = match regime {
        CostRegime::ComputeBound => format!(
            "{prices}: this {device} computes each extra token at nearly full price (compute-bound), so {pays_at}. Drafting seldom pays, and auto decodes plainly most of the time; the output is the same either way."
        ),
        CostRegime::Between => format!(
            "{prices}: an extra token costs part of a decode, so {pays_at}. Repetitive text and well-trained heads pay; the rest decodes plainly."
        ),
        CostRegime::MemoryBound => format!(
            "{prices}: reading the weights dominates each decode (memory-bound), so extra tokens are nearly free and {pays_at}. Drafting pays often."
        ),
    };
    let model_size = match widened.and_then(|w| Some((w, relative_costs(&w.points)?))) {
        Some((w, (wide_two, _))) if regime_of(wide_two) == CostRegime::ComputeBound => format!(
            "The default model widened to a bigger model's cost ({}, {:.1} GB of weights) costs {wide_two:.2}x for 2 tokens here as well: on this {device} a bigger model does not make extra tokens cheaper. A GPU, or a CPU with more memory bandwidth per core, would.",
            w.file_name,
            w.file_bytes as f64 / 1e9
        ),
        Some((w, (wide_two, _))) => format!(
            "The default model widened to a bigger model's cost ({}, {:.1} GB of weights) costs {wide_two:.2}x for 2 tokens here: at that size a drafted token pays when it is accepted more than {:.0}% of the time.",
            w.file_name,
            w.file_bytes as f64 / 1e9,
            (wide_two - 1.0).clamp(0.0, 1.0) * 100.0
        ),
        None => "A bigger model (1B-8B) reads more weights per token, and where reading dominates, extra tokens are nearly free. `medusa bench --wide 4` measures that here: the default model's tokens at a 1.8B model's cost.".to_owned(),
    };
    let better = (!on_gpu)
        .then(|| format_that_batches(file_type, kernels))
        .flatten();
    Some(DraftingOutlook {
        two_tokens,
        four_tokens,
        regime,
        break_even_acceptance,
        explanation,
        model_size,
        better_format: better.as_ref().map(|(to, _)| (*to).to_owned()),
        format_note: better.map(|(_, note)| note),
    })
}

fn regime_of(two_tokens: f64) -> CostRegime {
    if two_tokens >= COMPUTE_BOUND {
        CostRegime::ComputeBound
    } else if two_tokens <= MEMORY_BOUND {
        CostRegime::MemoryBound
    } else {
        CostRegime::Between
    }
}

/// Decode time of 2 and of 4 tokens over one token's (between measured sizes, as the budget
/// reads them); `None` without a figure at one token.
fn relative_costs(points: &[CostPoint]) -> Option<(f64, f64)> {
    points.iter().find(|p| p.tokens == 1 && p.ms > 0.0)?;
    let costs = CostModel::with_bands(points.to_vec(), CostSource::Given, None);
    let one = costs.cost(1);
    Some((costs.cost(2) / one, costs.cost(4) / one))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs(figures: &[(usize, f64)]) -> Vec<CostPoint> {
        figures
            .iter()
            .map(|&(tokens, ms)| CostPoint::without_spread(tokens, ms))
            .collect()
    }

    #[test]
    fn a_cpu_that_computes_each_token_is_told_drafting_seldom_pays() {
        let here = costs(&[(1, 27.1), (2, 49.2), (4, 77.1)]);
        let outlook = drafting_outlook(&here, "Q4_1", false, CpuKernels::Stock, None).unwrap();
        assert_eq!(outlook.regime, CostRegime::ComputeBound);
        assert!((outlook.two_tokens - 1.8155).abs() < 1e-3);
        assert!(
            outlook.explanation.contains("2 tokens costs 1.82x one"),
            "{}",
            outlook.explanation
        );
        assert!(outlook.explanation.contains("more than 82% of the time"));
        assert_eq!(outlook.better_format.as_deref(), Some("IQ4_NL"));
        let note = outlook.format_note.unwrap();
        assert!(
            note.starts_with("Q4_1 weights are not repacked")
                && note.contains("quantizes the weights a second time")
                && note.contains("`medusa quantize --type iq4_nl`"),
            "{note}"
        );
        assert!(outlook.model_size.contains("medusa bench --wide 4"));
    }

    #[test]
    fn cheap_extra_tokens_are_memory_bound_and_formats_that_batch_are_left_alone() {
        let flat = costs(&[(1, 10.0), (2, 10.5), (4, 11.0)]);
        let outlook = drafting_outlook(&flat, "Q4_0", false, CpuKernels::Stock, None).unwrap();
        assert_eq!(outlook.regime, CostRegime::MemoryBound);
        assert_eq!(outlook.better_format, None);
        for repacked in ["IQ4_NL", "iq4_nl"] {
            assert_eq!(format_that_batches(repacked, CpuKernels::Stock), None);
        }
        // A float model is quantized once: no word of a second quantization.
        let (_, note) = format_that_batches("F16", CpuKernels::Batched).unwrap();
        assert!(!note.contains("second time"), "{note}");
        // The patched kernels batch Q4_1: nothing to convert it to, unless they are off.
        assert_eq!(format_that_batches("Q4_1", CpuKernels::Batched), None);
        assert_eq!(format_that_batches("Q4_1", CpuKernels::BatchedAvx2), None);
        assert!(format_that_batches("q4_1", CpuKernels::Stock).is_some());
        // On a GPU the CPU kernels do not matter.
        let on_gpu = drafting_outlook(&flat, "Q4_1", true, CpuKernels::Stock, None).unwrap();
        assert_eq!(on_gpu.better_format, None);
    }

    #[test]
    fn a_measured_widened_model_says_what_size_changes() {
        let here = costs(&[(1, 6.4), (2, 12.9), (4, 17.1)]);
        let wide = WidenedCosts {
            file_name: "m.wide4.Q4_0.gguf".into(),
            file_bytes: 1_050_000_000,
            points: costs(&[(1, 155.0), (2, 217.0), (4, 217.0)]),
        };
        let outlook =
            drafting_outlook(&here, "Q4_0", false, CpuKernels::Batched, Some(&wide)).unwrap();
        assert!(
            outlook.model_size.contains("1.40x for 2 tokens"),
            "{}",
            outlook.model_size
        );
        assert!(outlook.model_size.contains("more than 40%"));
        let steep_wide = WidenedCosts {
            points: costs(&[(1, 27.1), (2, 49.2), (4, 77.1)]),
            ..wide
        };
        let outlook =
            drafting_outlook(&here, "Q4_0", false, CpuKernels::Batched, Some(&steep_wide)).unwrap();
        assert!(outlook
            .model_size
            .contains("does not make extra tokens cheaper"));
    }

    #[test]
    fn sizes_between_measured_ones_are_read_as_the_budget_reads_them() {
        let outlook = drafting_outlook(
            &costs(&[(1, 10.0), (8, 45.0)]),
            "Q4_0",
            false,
            CpuKernels::Stock,
            None,
        )
        .unwrap();
        assert_eq!((outlook.two_tokens, outlook.four_tokens), (1.5, 2.5));
        assert!(drafting_outlook(
            &costs(&[(2, 10.0), (8, 40.0)]),
            "Q4_0",
            false,
            CpuKernels::Stock,
            None
        )
        .is_none());
    }
}
