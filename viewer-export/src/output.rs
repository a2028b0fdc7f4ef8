//! Writing an output file from shards rendered in parallel: shards are rendered a window at a time (so memory
//! stays bounded by two windows, never the whole output), and each window is appended in order while the next
//! renders. With gzip, each shard is also compressed in parallel into deflate blocks that end on a byte boundary
//! (pigz's method), so the result is one ordinary gzip member any reader accepts. The file is written under a temporary name and renamed at the end;
//! on any error the partial file is removed.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use flate2::{Compress, Compression, FlushCompress};
use rayon::prelude::*;

/// Shards rendered at once, per rayon thread.
const WINDOW_PER_THREAD: usize = 2;

/// A rendered shard, and its deflate blocks and CRC when gzipping.
type Rendered = (Vec<u8>, Option<(Vec<u8>, crc32fast::Hasher)>);

pub struct Output {
    tmp: PathBuf,
    path: PathBuf,
    file: Option<BufWriter<File>>,
    gzip: Option<Gzip>,
    written: u64,
    /// Items written since [`Output::begin_list`], for separators.
    items: u64,
    /// Told how many shards have been appended since the last call, after each window.
    progress: Option<Box<dyn FnMut(usize) + Send>>,
}

struct Gzip {
    level: Compression,
    crc: crc32fast::Hasher,
    len: u64,
}

fn deflate_sync(level: Compression, data: &[u8], finish: bool) -> io::Result<Vec<u8>> {
    let mut c = Compress::new(level, false);
    let mut out = Vec::with_capacity(data.len() / 3 + 64);
    let flush = if finish { FlushCompress::Finish } else { FlushCompress::Sync };
    loop {
        let before_in = c.total_in() as usize;
        out.reserve(data.len() / 4 + 1024);
        let status = c.compress_vec(&data[before_in..], &mut out, flush).map_err(io::Error::other)?;
        let done_input = c.total_in() as usize == data.len();
        match status {
            flate2::Status::StreamEnd => break,
            _ if done_input && !finish && out.capacity() > out.len() => break,
            _ => {}
        }
    }
    Ok(out)
}

impl Output {
    /// Creates `<path>.tmp-<pid>`; [`Output::finish`] renames it to `path`.
    pub fn create(path: &Path, gzip: bool) -> io::Result<Output> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".tmp-{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let f = File::create(&tmp)?;
        let mut o = Output {
            tmp,
            path: path.to_path_buf(),
            file: Some(BufWriter::with_capacity(256 << 10, f)),
            gzip: gzip.then(|| Gzip { level: Compression::new(3), crc: crc32fast::Hasher::new(), len: 0 }),
            written: 0,
            items: 0,
            progress: None,
        };
        if o.gzip.is_some() {
            // Member header: deflate, no name, no mtime, OS unknown.
            o.raw(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff])?;
        }
        Ok(o)
    }

    fn raw(&mut self, b: &[u8]) -> io::Result<()> {
        self.file.as_mut().expect("output open").write_all(b)?;
        self.written += b.len() as u64;
        Ok(())
    }

    /// Appends uncompressed bytes (headers, separators: small writes).
    pub fn write(&mut self, b: &[u8]) -> io::Result<()> {
        if b.is_empty() {
            return Ok(());
        }
        match &mut self.gzip {
            None => self.raw(b),
            Some(g) => {
                g.crc.update(b);
                g.len += b.len() as u64;
                let level = g.level;
                let z = deflate_sync(level, b, false)?;
                self.raw(&z)
            }
        }
    }

    /// Calls `f` with the number of shards appended, after each window of [`Output::write_shards`].
    pub fn on_progress(&mut self, f: impl FnMut(usize) + Send + 'static) {
        self.progress = Some(Box::new(f));
    }

    /// Starts a list: the next item written by [`Output::write_shards`] or [`Output::write_item`] gets no separator.
    pub fn begin_list(&mut self) {
        self.items = 0;
    }

    /// Appends one list item, preceded by `sep` unless it is the first of the list.
    pub fn write_item(&mut self, sep: &[u8], item: &[u8]) -> io::Result<()> {
        if item.is_empty() {
            return Ok(());
        }
        if self.items > 0 {
            self.write(sep)?;
        }
        self.items += 1;
        self.write(item)
    }

    /// Renders shards `0..n` in parallel with `render` and appends them in order as items of the current list
    /// (`sep` between non-empty ones). Shards are rendered a window at a time, and each window is appended to the
    /// file while the next one renders, so the file writes (a single stream) overlap the encoding.
    pub fn write_shards<F>(&mut self, n: usize, sep: &[u8], render: F) -> io::Result<()>
    where
        F: Fn(usize) -> Vec<u8> + Sync,
    {
        let window = (rayon::current_num_threads() * WINDOW_PER_THREAD).max(1);
        let level = self.gzip.as_ref().map(|g| g.level);
        let render_window = |start: usize, end: usize| -> Vec<io::Result<Rendered>> {
            (start..end)
                .into_par_iter()
                .map(|i| {
                    let b = render(i);
                    match level {
                        Some(l) if !b.is_empty() => {
                            let mut h = crc32fast::Hasher::new();
                            h.update(&b);
                            let z = deflate_sync(l, &b, false)?;
                            Ok((b, Some((z, h))))
                        }
                        _ => Ok((b, None)),
                    }
                })
                .collect()
        };
        let mut rendered: Option<Vec<io::Result<Rendered>>> = None;
        for start in (0..n).step_by(window) {
            let end = (start + window).min(n);
            let next = match rendered.take() {
                None => render_window(start, end),
                Some(prev) => {
                    let (appended, next) =
                        rayon::join(|| self.append_rendered(prev, sep), || render_window(start, end));
                    appended?;
                    next
                }
            };
            rendered = Some(next);
        }
        if let Some(last) = rendered {
            self.append_rendered(last, sep)?;
        }
        Ok(())
    }

    /// Appends one rendered window in order, then reports progress.
    fn append_rendered(&mut self, window: Vec<io::Result<Rendered>>, sep: &[u8]) -> io::Result<()> {
        let count = window.len();
        for r in window {
            let (plain, compressed) = r?;
            if plain.is_empty() {
                continue;
            }
            if self.items > 0 {
                self.write(sep)?;
            }
            self.items += 1;
            match (compressed, &mut self.gzip) {
                (Some((z, h)), Some(g)) => {
                    g.crc.combine(&h);
                    g.len += plain.len() as u64;
                    self.raw(&z)?;
                }
                _ => self.raw(&plain)?,
            }
        }
        if let Some(p) = &mut self.progress {
            p(count);
        }
        Ok(())
    }

    /// Completes the file (gzip trailer) and moves it to its final name. Returns the bytes written.
    pub fn finish(mut self) -> io::Result<u64> {
        if let Some(g) = self.gzip.take() {
            let end = deflate_sync(g.level, &[], true)?;
            self.raw(&end)?;
            let crc = g.crc.clone().finalize();
            self.raw(&crc.to_le_bytes())?;
            self.raw(&(g.len as u32).to_le_bytes())?;
        }
        let mut f = self.file.take().expect("output open");
        f.flush()?;
        // No fsync: a converted trace can always be made again, and a sync costs tens of milliseconds on some
        // disks, as much as the whole conversion of a small recording.
        drop(f);
        // An existing trace is removed first: renaming over it makes ext4 (auto_da_alloc, on by default) write
        // the new file's data out before the rename returns, 0.15-0.55 ms for a 250 KB trace, as good as a sync.
        // Removal errors are left to the rename to report.
        let _ = std::fs::remove_file(&self.path);
        std::fs::rename(&self.tmp, &self.path)?;
        Ok(self.written)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        // Not finished: an error happened; leave nothing half-written behind.
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn shards_in_order_plain_and_gzip() {
        let dir = tempfile::tempdir().unwrap();
        for gz in [false, true] {
            let p = dir.path().join(if gz { "x.gz" } else { "x" });
            let mut o = Output::create(&p, gz).unwrap();
            o.write(b"[").unwrap();
            o.begin_list();
            // Enough shards for three and a half windows on any machine, so windows are appended while the next
            // renders; the progress callback sees every shard once.
            let n = rayon::current_num_threads() * WINDOW_PER_THREAD * 3 + 3;
            let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counter = seen.clone();
            o.on_progress(move |k| {
                counter.fetch_add(k, std::sync::atomic::Ordering::Relaxed);
            });
            o.write_shards(n, b",", |i| if i == 4 { Vec::new() } else { format!("{i}").repeat(1000).into_bytes() })
                .unwrap();
            o.write(b"]").unwrap();
            o.finish().unwrap();
            assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), n);
            let raw = std::fs::read(&p).unwrap();
            let text = if gz {
                let mut s = String::new();
                flate2::read::GzDecoder::new(&raw[..]).read_to_string(&mut s).unwrap();
                s
            } else {
                String::from_utf8(raw).unwrap()
            };
            let want: Vec<String> = (0..n).filter(|&i| i != 4).map(|i| format!("{i}").repeat(1000)).collect();
            assert_eq!(text, format!("[{}]", want.join(",")));
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "no temporary files left");
    }

    #[test]
    fn an_unfinished_output_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("y");
        let mut o = Output::create(&p, false).unwrap();
        o.write(b"partial").unwrap();
        drop(o);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(Output::create(Path::new("/nonexistent-dir/z"), false).is_err());
    }
}
