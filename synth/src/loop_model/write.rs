//! A generated recording written to a file (or any writer), its buffers encoded in parallel.

use std::io::Write;
use std::path::Path;

use rayon::prelude::*;

use cutr_format::{ActivityEncoder, FormatError, LossCounters, Writer, WriterOptions};

use super::*;

/// Writes a complete synthetic `.cutr` file and returns its ground truth. Buffers are encoded in parallel. The
/// file id derives from the seed, so one seed writes the same bytes every time.
pub fn write_file(path: &Path, opts: SynthOptions) -> Result<SynthTruth, FormatError> {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&opts.seed.to_le_bytes());
    id[8..].copy_from_slice(b"cutrsynt");
    let w = Writer::create(path, WriterOptions { created_unix_ns: Some(T0), file_id: Some(id), ..Default::default() })?;
    let (w, truth) = write_to(w, opts)?;
    drop(w);
    Ok(truth)
}

/// Writes a synthetic trace through `writer` (which must be fresh) and finishes it.
pub fn write_to<W: Write>(writer: Writer<W>, opts: SynthOptions) -> Result<(W, SynthTruth), FormatError> {
    write_to_with(writer, opts, |_, _| Ok(()))
}

/// [`write_to`], with `extra` writing more chunks (counter samples, say) after the activity and before the loss
/// report and footer; it sees the truth of what was generated.
pub fn write_to_with<W: Write>(
    mut writer: Writer<W>,
    opts: SynthOptions,
    extra: impl FnOnce(&mut Writer<W>, &SynthTruth) -> Result<(), FormatError>,
) -> Result<(W, SynthTruth), FormatError> {
    let mut synth = Synth::new(opts).map_err(FormatError::Invalid)?;
    writer.write_metadata(&synth.metadata())?;
    let layouts = synth.layouts().clone();
    let threads = rayon::current_num_threads().max(1);
    loop {
        let batch: Vec<SynthBuffer> = (0..threads * 2).map_while(|_| synth.next_buffer()).collect();
        if batch.is_empty() {
            break;
        }
        let encoded: Vec<_> =
            batch.par_iter().map_init(|| ActivityEncoder::new(&layouts, 3), |enc, b| enc.encode(&b.bytes)).collect();
        for (b, e) in batch.iter().zip(encoded) {
            if !b.new_strings.is_empty() {
                let entries: Vec<(u64, &str)> = b.new_strings.iter().map(|(p, s)| (*p, s.as_str())).collect();
                writer.write_strings(&entries)?;
            }
            writer.append_encoded(e)?;
        }
    }
    writer.write_clocks(synth.clock_samples())?;
    // The OS names a recorder reads from /proc: the main thread keeps the program's name.
    writer.write_thread_names(&[(MAIN_THREAD, "python3".into()), (LOADER_THREAD, "pt_data_loader".into())])?;
    extra(&mut writer, synth.truth())?;
    writer.write_loss(&LossCounters { is_final: true, ..Default::default() })?;
    let truth = synth.truth().clone();
    Ok((writer.finish()?, truth))
}
