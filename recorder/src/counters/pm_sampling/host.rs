//! Choosing the metrics to sample on a chip, with CUPTI's Profiler Host API: which of those asked for exist, which
//! fit one pass together (PM sampling takes one), their config image, and their descriptions and units.

use std::ffi::{CStr, CString};
use std::sync::{Arc, Mutex};

use cutr_format::CounterMetric;

use crate::ffi::pm::{Api, Chip, ConfigImage, HostObject};

/// A device's host object, shared by its session (which releases it at finish) and its evaluating thread.
pub(super) type SharedHost = Arc<Mutex<Option<HostObject>>>;

/// Device `d`'s chip: its name and counter-availability image (two device calls: the caller holds the gate).
pub(super) fn chip(api: &Api, d: u32) -> Result<Arc<Chip>, String> {
    let name = api.chip_name(d)?;
    debug!("chip name");
    let availability = api.counter_availability(d)?;
    Ok(Arc::new(Chip { name, availability }))
}

/// The metrics, in order, that exist on the chip and fit one pass together; notes the others. Of `a|b`
/// alternatives the first the chip has is taken. Existence is asked of a host object without metrics (adding a
/// name the chip lacks fails with INVALID_PARAMETER or UNKNOWN); each fit trial configures a fresh host object
/// (metrics added to one cannot be taken back).
pub(super) fn fit_metrics(
    api: &Api,
    chip: &Arc<Chip>,
    wanted: &[String],
    note: &dyn Fn(String),
    d: u32,
) -> Vec<CString> {
    let lister = match api.host_initialize(chip) {
        Ok(h) => h,
        Err(e) => {
            note(format!("PM sampling on device {d}: {e}"));
            return Vec::new();
        }
    };
    let mut existing: Vec<(&String, CString)> = Vec::new();
    for m in wanted {
        let found = m
            .split('|')
            .filter_map(|alt| CString::new(alt.trim()).ok())
            .find(|alt| properties(api, &lister, alt).is_some());
        match found {
            Some(name) => existing.push((m, name)),
            None => note(format!("PM sampling on device {d}: {m} left out: not a PM sampling metric of this chip")),
        }
    }
    api.host_deinitialize(lister);
    // Usually they all fit one pass: one trial. Otherwise each is added in turn (a trial per metric, ~40 ms each).
    let all: Vec<CString> = existing.iter().map(|(_, n)| n.clone()).collect();
    // A trial that needs more passes leaves its host object unreleased (as the sampler always has: releasing it
    // would be one CUPTI call more than before).
    if let Ok((host, _, 1)) = host_with(api, chip, &all) {
        api.host_deinitialize(host);
        return all;
    }
    let mut kept: Vec<CString> = Vec::new();
    for (m, name) in existing {
        let mut trial: Vec<CString> = kept.clone();
        trial.push(name);
        match host_with(api, chip, &trial) {
            Ok((host, _, 1)) => {
                api.host_deinitialize(host);
                kept = trial;
            }
            Ok((host, _, passes)) => {
                api.host_deinitialize(host);
                note(format!(
                    "PM sampling on device {d}: {m} left out: with the metrics before it, it needs {passes} passes \
                     (PM sampling takes one)"
                ));
            }
            Err(e) => note(format!("PM sampling on device {d}: {m} left out: {e}")),
        }
    }
    kept
}

/// A host object for `chip` configured with `names`, its config image and number of passes; the host object is
/// released again on failure.
pub(super) fn host_with(
    api: &Api,
    chip: &Arc<Chip>,
    names: &[CString],
) -> Result<(HostObject, ConfigImage, usize), String> {
    let mut host = api.host_initialize(chip)?;
    match config_for(api, &mut host, names) {
        Ok((image, passes)) => Ok((host, image, passes)),
        Err(e) => {
            api.host_deinitialize(host);
            Err(e)
        }
    }
}

/// The config image of `names` added to `host`, and its number of passes.
fn config_for(api: &Api, host: &mut HostObject, names: &[CString]) -> Result<(ConfigImage, usize), String> {
    api.host_add_metrics(host, names)?;
    let mut image = api.host_config_image(host)?;
    let passes = api.config_passes(&mut image)?;
    Ok((image, passes))
}

/// The metric's description and unit as the host API gives them; `None` when the chip has no such metric.
pub(super) fn properties(api: &Api, host: &HostObject, name: &CStr) -> Option<CounterMetric> {
    let p = api.metric_properties(host, name)?;
    Some(CounterMetric { name: name.to_string_lossy().into_owned(), unit: p.unit, description: p.description })
}
