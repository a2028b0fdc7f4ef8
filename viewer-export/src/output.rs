//! Writing an output file from shards rendered in parallel: shards are rendered a window at a time (so memory
//! stays bounded by two windows, never the whole output), and each window is appended in order while the next
//! renders. With gzip, each shard is also compressed in parallel into deflate blocks that end on a byte boundary
//! (pigz's method), so the result is one ordinary gzip member any reader accepts. The file is written under a
//! temporary name and renamed at the end; on any error the partial file is removed, and on SIGINT/SIGTERM too
//! (the name is registered with `cutr-cleanup`). A [`SizeLimit`] stops the writing once the file would pass it.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use flate2::{Compress, Compression, FlushCompress};
use rayon::prelude::*;

use crate::size_limit::SizeLimit;

/// Shards rendered at once, per rayon thread.
const WINDOW_PER_THREAD: usize = 2;

/// A rendered shard, and its deflate blocks and CRC when gzipping.
type Rendered = (Vec<u8>, Option<(Vec<u8>, crc32fast::Hasher)>);

pub struct Output {
    target: Target,
    file: Option<BufWriter<File>>,
    gzip: Option<Gzip>,
    written: u64,
    /// Items written since [`Output::begin_list`], for separators.
    items: u64,
    /// Told how many shards have been appended since the last call, after each window.
    progress: Option<Box<dyn FnMut(usize) + Send>>,
    /// Bytes the file may not pass.
    limit: Option<SizeLimit>,
}

/// Where an output's bytes go.
#[derive(Debug)]
enum Target {
    /// A regular file, new or replaced: written under a temporary name beside it and renamed over it at the end,
    /// so a failed or interrupted conversion leaves the old file (or nothing) behind.
    File { tmp: PathBuf, path: PathBuf, _removed_on_interrupt: cutr_cleanup::Registered },
    /// Standard output (`-`), or an existing path that is not a regular file (a device such as `/dev/null`, a
    /// FIFO): written in place, never removed or replaced.
    InPlace { path: PathBuf },
}

/// Why an output path cannot be written.
fn refuse(path: &Path, why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {why}", path.display()))
}

/// Creates `tmp`, a name no other file may hold: one left by an earlier run of the same process id (or a link
/// planted there) is removed by its name first, never followed or written through.
fn create_new(tmp: &Path) -> io::Result<File> {
    let open = || std::fs::OpenOptions::new().write(true).create_new(true).open(tmp);
    match open() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(tmp)?;
            open()
        }
        other => other,
    }
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
    /// Opens the output at `path`: `-` is standard output; an existing device or FIFO is written in place; a
    /// symbolic link is followed; a regular file is written as `<path>.tmp-<pid>` and renamed to `path` by
    /// [`Output::finish`]. A directory is refused before anything is created.
    pub fn create(path: &Path, gzip: bool) -> io::Result<Output> {
        let (target, f) = if path.as_os_str() == "-" {
            use std::os::fd::AsFd;
            let fd = io::stdout().as_fd().try_clone_to_owned()?;
            (Target::InPlace { path: path.to_path_buf() }, File::from(fd))
        } else {
            let path = cutr_cleanup::resolve_links(path);
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => return Err(refuse(&path, "is a directory")),
                Ok(m) if !m.is_file() => {
                    let f = std::fs::OpenOptions::new().write(true).open(&path)?;
                    (Target::InPlace { path }, f)
                }
                _ => {
                    let mut tmp = path.as_os_str().to_owned();
                    tmp.push(format!(".tmp-{}", std::process::id()));
                    let tmp = PathBuf::from(tmp);
                    let (registered, f) = cutr_cleanup::hold(|| {
                        let registered = cutr_cleanup::remove_on_interrupt(&tmp);
                        create_new(&tmp).map(|f| (registered, f))
                    })?;
                    (Target::File { tmp, path, _removed_on_interrupt: registered }, f)
                }
            }
        };
        let mut o = Output {
            target,
            file: Some(BufWriter::with_capacity(256 << 10, f)),
            gzip: gzip.then(|| Gzip { level: Compression::new(3), crc: crc32fast::Hasher::new(), len: 0 }),
            written: 0,
            items: 0,
            progress: None,
            limit: None,
        };
        if o.gzip.is_some() {
            // Member header: deflate, no name, no mtime, OS unknown.
            o.raw(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff])?;
        }
        Ok(o)
    }

    /// From now on, writing past `limit` fails (and the partial file is removed).
    pub fn set_limit(&mut self, limit: SizeLimit) {
        self.limit = Some(limit);
    }

    fn raw(&mut self, b: &[u8]) -> io::Result<()> {
        if let Some(limit) = &self.limit
            && self.written + b.len() as u64 > limit.bytes
        {
            return Err(io::Error::new(io::ErrorKind::FileTooLarge, limit.passed_while_writing()));
        }
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
        // Errors of the last writes (a full disk, `/dev/full`) surface here, before anything is renamed.
        let flushed = f.flush();
        drop(f);
        match &self.target {
            Target::InPlace { .. } => flushed?,
            Target::File { tmp, path, .. } => {
                let done = flushed.and_then(|()| {
                    // No fsync: a converted trace can always be made again, and a sync costs tens of milliseconds
                    // on some disks, as much as the whole conversion of a small recording. An existing trace is
                    // removed first: renaming over it makes ext4 (auto_da_alloc, on by default) write the new
                    // file's data out before the rename returns, 0.15-0.55 ms for a 250 KB trace, as good as a
                    // sync. Removal errors are left to the rename to report.
                    // Under `hold`: a signal meanwhile finds either the temporary file or the complete output.
                    cutr_cleanup::hold(|| {
                        let _ = std::fs::remove_file(path);
                        std::fs::rename(tmp, path)
                    })
                });
                if done.is_err() {
                    let _ = std::fs::remove_file(tmp);
                }
                done?;
            }
        }
        Ok(self.written)
    }

    /// Where the output is written (a symbolic link's target, not the link).
    pub fn path(&self) -> &Path {
        match &self.target {
            Target::File { path, .. } | Target::InPlace { path } => path,
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        // Not finished: an error happened; leave nothing half-written behind (a device written in place keeps
        // what it got).
        if self.file.take().is_some()
            && let Target::File { tmp, .. } = &self.target
        {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;

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

    #[test]
    fn writing_past_the_limit_fails_and_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.json");
        std::fs::write(&p, b"the old trace").unwrap();
        let mut o = Output::create(&p, false).unwrap();
        o.set_limit(SizeLimit { bytes: 1000, origin: "--max-output 1.0 KB".into() });
        o.write(&[b'x'; 1000]).unwrap();
        let err = o.write(b"y").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(
            err.to_string(),
            "the output passed the limit of 1.0 KB (--max-output 1.0 KB) while being written; nothing was kept: \
             write less with --start/--end or --kinds, or raise the limit with --max-output SIZE"
        );
        drop(o);
        assert_eq!(std::fs::read(&p).unwrap(), b"the old trace", "the old trace stays");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left");
    }

    #[test]
    fn a_link_at_the_temporary_name_is_removed_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let p = dir.path().join("t.json");
        let planted = dir.path().join(format!("t.json.tmp-{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        assert_eq!(write_all(&p, b"trace").unwrap(), 5);
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&p).unwrap(), b"trace");
        assert!(!planted.exists() && std::fs::symlink_metadata(&planted).is_err(), "the link is gone");
    }

    fn write_all(path: &Path, bytes: &[u8]) -> io::Result<u64> {
        let mut o = Output::create(path, false)?;
        o.write(bytes)?;
        o.finish()
    }

    #[test]
    fn devices_are_written_in_place_and_a_full_one_is_an_error() {
        assert_eq!(write_all(Path::new("/dev/null"), b"trace").unwrap(), 5);
        assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        // /dev/full takes the open and fails the write: disk full, reported, not swallowed.
        let err = write_all(Path::new("/dev/full"), &vec![7u8; 1 << 20]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28), "ENOSPC: {err}");
        assert!(std::fs::metadata("/dev/full").unwrap().file_type().is_char_device());
    }

    #[test]
    fn a_fifo_is_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        assert_eq!(write_all(&fifo, b"through the pipe").unwrap(), 16);
        assert_eq!(reader.join().unwrap(), b"through the pipe");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["pipe"], "the FIFO stays, nothing else appears");
    }

    #[test]
    fn a_symlink_is_followed_and_a_directory_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        std::fs::write(&real, b"old").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink("real.json", &link).unwrap();
        assert_eq!(write_all(&link, b"new trace").unwrap(), 9);
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays a link");
        assert_eq!(std::fs::read(&real).unwrap(), b"new trace");
        let err = write_all(dir.path(), b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().ends_with("is a directory"), "{err}");
        let mut names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["link.json", "real.json"], "no temporary file left behind");
    }
}
