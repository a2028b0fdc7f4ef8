//! The SASS text of sampled PCs, from NVIDIA's `nvdisasm` where one is installed: optional, never required. Found
//! as `CUTR_NVDISASM` or `nvdisasm` on the PATH (the CUDA toolkit's, or PyPI's `nvidia-cuda-nvdisasm`). Each run
//! gets a private temporary directory (the cubin, the listing) and a time limit (60 s, `CUTR_NVDISASM_TIMEOUT`);
//! both the directory and the process are registered with `cutr-cleanup`, so an interrupted `source` leaves
//! neither behind.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long one `nvdisasm` run may take unless `CUTR_NVDISASM_TIMEOUT` says otherwise: the 26 cubins of a PyTorch
/// program (8 MB) take a few seconds in all, so a run this long is stuck.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A usable `nvdisasm`.
#[derive(Clone, Debug)]
pub(crate) struct Disassembler {
    exe: PathBuf,
    /// The limit of one run, or why `CUTR_NVDISASM_TIMEOUT` could not be read.
    timeout: Result<Duration, String>,
}

/// What one `nvdisasm` run gives: every instruction's text, and the calls of each kernel's section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Listing {
    /// Instructions by (mangled kernel, offset in its section).
    pub text: HashMap<(String, u64), String>,
    /// Per kernel, `(offset, instruction)` of each call instruction in its section, in listing order: the call
    /// sites, read from the same run as the text.
    pub calls: HashMap<String, Vec<(u64, String)>>,
}

impl Listing {
    /// The calls of `kernel`'s section, as [`cutr_source::SourceMap::call_sites`] takes them.
    pub fn calls_of<'a>(&'a self, kernel: &str) -> impl Iterator<Item = (u64, &'a str)> + 'a {
        self.calls.get(kernel).into_iter().flatten().map(|(o, t)| (*o, t.as_str()))
    }
}

/// `CUTR_NVDISASM_TIMEOUT` (`30s`, `500ms`), else [`DEFAULT_TIMEOUT`].
fn timeout() -> Result<Duration, String> {
    match std::env::var("CUTR_NVDISASM_TIMEOUT") {
        Err(_) => Ok(DEFAULT_TIMEOUT),
        Ok(v) => match humantime::parse_duration(v.trim()) {
            Ok(d) if !d.is_zero() => Ok(d),
            _ => Err(format!("CUTR_NVDISASM_TIMEOUT={v:?} is not a duration (e.g. 30s, 2m)")),
        },
    }
}

impl Disassembler {
    /// This one.
    pub fn at(exe: &Path) -> Disassembler {
        Disassembler { exe: exe.to_path_buf(), timeout: timeout() }
    }

    /// `CUTR_NVDISASM` if set (empty: none), else `nvdisasm` on the PATH.
    pub fn find() -> Option<Disassembler> {
        let exe = match std::env::var_os("CUTR_NVDISASM") {
            Some(v) if v.is_empty() => return None,
            Some(v) => PathBuf::from(v),
            None => std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).map(|d| d.join("nvdisasm")).collect::<Vec<_>>())
                .unwrap_or_default()
                .into_iter()
                .find(|p| p.is_file())?,
        };
        Some(Disassembler::at(&exe))
    }

    pub fn path(&self) -> &Path {
        &self.exe
    }

    /// Every instruction of a cubin (`nvdisasm -c`), or why there is none: it failed, or ran past its time limit
    /// and was ended.
    pub fn disassemble(&self, cubin: &[u8]) -> Result<Listing, String> {
        let limit = self.timeout.clone()?;
        let work = cutr_cleanup::hold(|| {
            let dir = tempfile::Builder::new().prefix("cutr-nvdisasm").tempdir()?;
            let registered = cutr_cleanup::remove_on_interrupt(dir.path());
            std::io::Result::Ok((dir, registered))
        })
        .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
        let (input, listing, errors) =
            (work.0.path().join("in.cubin"), work.0.path().join("listing.txt"), work.0.path().join("stderr.txt"));
        // Created inside `hold`, so that a signal's cleanup never finds a file appearing in the directory it
        // removes. The listing goes to a file, not a pipe: a listing of any size never blocks the child while
        // only its exit is waited for.
        let (mut cubin_file, out, err) = cutr_cleanup::hold(|| {
            std::io::Result::Ok((File::create(&input)?, File::create(&listing)?, File::create(&errors)?))
        })
        .map_err(|e| e.to_string())?;
        std::io::Write::write_all(&mut cubin_file, cubin).map_err(|e| e.to_string())?;
        drop(cubin_file);
        let mut command = Command::new(&self.exe);
        command.arg("-c").arg(&input).stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cutr_cleanup::spawn(&mut command).map_err(|e| e.to_string())?;
        let Some(status) = child.wait_for(limit).map_err(|e| e.to_string())? else {
            let _ = child.kill();
            return Err(format!(
                "it ran past {} and was ended (CUTR_NVDISASM_TIMEOUT sets the limit)",
                humantime::format_duration(limit)
            ));
        };
        if !status.success() {
            let why = std::fs::read(&errors).unwrap_or_default();
            return Err(match String::from_utf8_lossy(&why).trim() {
                "" => format!("it failed ({status})"),
                text => text.to_string(),
            });
        }
        let text = std::fs::read(&listing).map_err(|e| e.to_string())?;
        Ok(parse(&String::from_utf8_lossy(&text)))
    }
}

/// Reads `nvdisasm -c` output: a `.text.<function>:` label opens each function, and each instruction line is
/// `/*offset*/ text ;` (offset in hex, from the function's start).
fn parse(listing: &str) -> Listing {
    let mut out = Listing::default();
    let mut function: Option<&str> = None;
    for line in listing.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix(".text.").and_then(|n| n.strip_suffix(':')) {
            function = Some(name);
            continue;
        }
        let (Some(f), Some(rest)) = (function, t.strip_prefix("/*")) else { continue };
        let Some((offset, text)) = rest.split_once("*/") else { continue };
        let Ok(offset) = u64::from_str_radix(offset, 16) else { continue };
        let text = text.trim().trim_end_matches(';').trim_end();
        if cutr_source::call_target(text).is_some() {
            out.calls.entry(f.to_string()).or_default().push((offset, text.to_string()));
        }
        if !text.is_empty() {
            out.text.insert((f.to_string(), offset), text.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_functions_and_offsets_from_a_listing() {
        let listing = "\t.target\tsm_90\n.text._Z9fma_chainPfi:\n        /*0000*/                   LDC R1, c[0x0][0x28] ;\n\
                       .L_x_0:\n        /*0160*/              @!P0 BRA `(.L_x_0) ;\n.text._Z5chasePKjjiPj:\n\
                               /*0330*/                   LDG.E R9, desc[UR4][R10.64] ;\n";
        let l = parse(listing);
        assert_eq!(l.text.len(), 3);
        assert_eq!(l.text[&("_Z9fma_chainPfi".to_string(), 0x160)], "@!P0 BRA `(.L_x_0)");
        assert_eq!(l.text[&("_Z5chasePKjjiPj".to_string(), 0x330)], "LDG.E R9, desc[UR4][R10.64]");
        assert!(l.calls.is_empty());
        let calls =
            parse(".text.k:\n /*00b0*/ CALL.REL.NOINC `($k$_Z1gv) ;\n$k$_Z1gv:\n /*0a80*/ RET.REL.NODEC R8 `(k) ;\n");
        assert_eq!(calls.calls_of("k").collect::<Vec<_>>(), [(0xb0, "CALL.REL.NOINC `($k$_Z1gv)")]);
    }
}
