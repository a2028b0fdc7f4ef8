//! The SASS text of sampled PCs, from NVIDIA's `nvdisasm` where one is installed: optional, never required. Found
//! as `CUTR_NVDISASM` or `nvdisasm` on the PATH (the CUDA toolkit's, or PyPI's `nvidia-cuda-nvdisasm`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A usable `nvdisasm`.
#[derive(Clone, Debug)]
pub(crate) struct Disassembler {
    exe: PathBuf,
}

/// Instructions by (mangled function, offset in the function).
pub(crate) type Listing = HashMap<(String, u64), String>;

impl Disassembler {
    /// This one.
    pub fn at(exe: &Path) -> Disassembler {
        Disassembler { exe: exe.to_path_buf() }
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
        Some(Disassembler { exe })
    }

    pub fn path(&self) -> &Path {
        &self.exe
    }

    /// Every instruction of a cubin (`nvdisasm -c`), or why there is none.
    pub fn disassemble(&self, cubin: &[u8]) -> Result<Listing, String> {
        let mut file = tempfile::Builder::new().suffix(".cubin").tempfile().map_err(|e| e.to_string())?;
        std::io::Write::write_all(&mut file, cubin).map_err(|e| e.to_string())?;
        let out = Command::new(&self.exe).arg("-c").arg(file.path()).output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(parse(&String::from_utf8_lossy(&out.stdout)))
    }
}

/// Reads `nvdisasm -c` output: a `.text.<function>:` label opens each function, and each instruction line is
/// `/*offset*/ text ;` (offset in hex, from the function's start).
fn parse(listing: &str) -> Listing {
    let mut out = Listing::new();
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
        if !text.is_empty() {
            out.insert((f.to_string(), offset), text.to_string());
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
        assert_eq!(l.len(), 3);
        assert_eq!(l[&("_Z9fma_chainPfi".to_string(), 0x160)], "@!P0 BRA `(.L_x_0)");
        assert_eq!(l[&("_Z5chasePKjjiPj".to_string(), 0x330)], "LDG.E R9, desc[UR4][R10.64]");
    }
}
