//! CUPTI activity record layouts.
//!
//! CUPTI's activity buffers carry no per-record length: the size of each record follows from its kind *and* from
//! the libcupti release that wrote it (CUDA 12.9 writes `CUpti_ActivityKernel9`, 208 bytes; 13.0 writes
//! `CUpti_ActivityKernel10`, 216 bytes). A [`LayoutTable`] maps each kind to the struct a release writes, with the
//! offsets of its fields. The recorder copies the table of the running libcupti into every file, so readers
//! never need CUPTI; the built-in tables ([`builtin`]) are generated from NVIDIA's headers by
//! `schema/tools/gen_layouts.py`.

use std::borrow::Cow;
use std::fmt;

use crate::fb;

#[rustfmt::skip]
mod cupti_130001;
#[rustfmt::skip]
mod cupti_28;

/// How a field is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldType {
    U8,
    U16,
    U32,
    U64,
    I32,
    I64,
    F64,
    Ptr,
    Bytes,
}

/// What a field means: it drives the codec's lossless transforms and tells converters how to read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldRole {
    Plain,
    /// `CUpti_ActivityKind`, at offset 0 of every record.
    Kind,
    /// A nanosecond timestamp.
    Time,
    /// A nanosecond end timestamp; its start is the record's `start` field.
    End,
    /// An integer id that mostly grows from one record to the next (correlation ids).
    Sequential,
    /// A host pointer to a NUL-terminated string (resolved through the file's string tables).
    StringPtr,
    /// A host pointer to a blob (resolved through blob chunks).
    BlobPtr,
    /// A host pointer with no meaning offline.
    OpaquePtr,
}

/// One field of a record struct.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldLayout {
    /// The C member name; members of nested structs and unions are dotted (`objectId.pt.threadId`).
    pub name: Cow<'static, str>,
    pub offset: u16,
    pub size: u16,
    pub ty: FieldType,
    pub role: FieldRole,
}

/// The C struct CUPTI writes for one activity kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RecordLayout {
    pub kind: u32,
    pub kind_name: Cow<'static, str>,
    pub struct_name: Cow<'static, str>,
    pub size: u32,
    pub fields: Cow<'static, [FieldLayout]>,
}

impl RecordLayout {
    /// The field called `name`, if this struct has it.
    pub fn field(&self, name: &str) -> Option<&FieldLayout> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The offset of field `name`, if this struct has it.
    pub fn offset(&self, name: &str) -> Option<usize> {
        self.field(name).map(|f| f.offset as usize)
    }
}

/// Why a layout table read from a file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// A record size that is zero, not a multiple of 8, or absurdly large.
    BadSize { kind: u32, size: u32 },
    /// A field that does not fit inside its record.
    FieldOutOfBounds { kind: u32, field: String },
    /// The same kind listed twice.
    DuplicateKind(u32),
    /// A kind value too large to be a CUPTI activity kind.
    BadKind(u32),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::BadSize { kind, size } => {
                write!(f, "record kind {kind} has an invalid size {size}")
            }
            LayoutError::FieldOutOfBounds { kind, field } => {
                write!(f, "field {field} of record kind {kind} lies outside the record")
            }
            LayoutError::DuplicateKind(k) => write!(f, "record kind {k} is described twice"),
            LayoutError::BadKind(k) => write!(f, "record kind {k} is out of range"),
        }
    }
}

impl std::error::Error for LayoutError {}

/// Largest kind value a table may describe; CUPTI 13.0 defines kinds up to 54.
pub const MAX_KIND: u32 = 1024;
/// Largest record a table may describe (the biggest CUPTI record today is under 256 bytes).
pub const MAX_RECORD_SIZE: u32 = 4096;

/// Record layouts by kind, for one CUPTI release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutTable {
    /// The CUPTI API version (`cuptiGetVersion`) these layouts belong to.
    pub cupti_api_version: u32,
    records: Vec<RecordLayout>,
    /// Index into `records` by kind; `u16::MAX` = no layout.
    by_kind: Vec<u16>,
}

impl LayoutTable {
    /// Builds and validates a table.
    pub fn new(cupti_api_version: u32, records: Vec<RecordLayout>) -> Result<Self, LayoutError> {
        let mut by_kind = Vec::new();
        for (i, r) in records.iter().enumerate() {
            if r.kind >= MAX_KIND {
                return Err(LayoutError::BadKind(r.kind));
            }
            if r.size == 0 || r.size % 8 != 0 || r.size > MAX_RECORD_SIZE {
                return Err(LayoutError::BadSize { kind: r.kind, size: r.size });
            }
            if let Some(f) = r.fields.iter().find(|f| f.offset as u32 + f.size as u32 > r.size) {
                return Err(LayoutError::FieldOutOfBounds { kind: r.kind, field: f.name.to_string() });
            }
            let k = r.kind as usize;
            if by_kind.len() <= k {
                by_kind.resize(k + 1, u16::MAX);
            }
            if by_kind[k] != u16::MAX {
                return Err(LayoutError::DuplicateKind(r.kind));
            }
            by_kind[k] = i as u16;
        }
        Ok(LayoutTable { cupti_api_version, records, by_kind })
    }

    /// The layout of `kind`, if the table has one.
    #[inline]
    pub fn get(&self, kind: u32) -> Option<&RecordLayout> {
        match self.by_kind.get(kind as usize) {
            Some(&i) if i != u16::MAX => Some(&self.records[i as usize]),
            _ => None,
        }
    }

    /// The record size of `kind`, if known.
    #[inline]
    pub fn size_of(&self, kind: u32) -> Option<usize> {
        self.get(kind).map(|r| r.size as usize)
    }

    pub fn records(&self) -> &[RecordLayout] {
        &self.records
    }

    /// Serializes the table as flatbuffers `RecordLayout`s.
    pub fn to_fb<'b, A: flatbuffers::Allocator + 'b>(
        &self,
        b: &mut flatbuffers::FlatBufferBuilder<'b, A>,
    ) -> flatbuffers::WIPOffset<flatbuffers::Vector<'b, flatbuffers::ForwardsUOffset<fb::RecordLayout<'b>>>> {
        let mut recs = Vec::with_capacity(self.records.len());
        for r in &self.records {
            let mut fields = Vec::with_capacity(r.fields.len());
            for f in r.fields.iter() {
                let name = b.create_string(&f.name);
                fields.push(fb::FieldLayout::create(
                    b,
                    &fb::FieldLayoutArgs {
                        name: Some(name),
                        offset: f.offset,
                        size: f.size,
                        type_: f.ty.to_fb(),
                        role: f.role.to_fb(),
                    },
                ));
            }
            let fields = b.create_vector(&fields);
            let kind_name = b.create_string(&r.kind_name);
            let struct_name = b.create_string(&r.struct_name);
            recs.push(fb::RecordLayout::create(
                b,
                &fb::RecordLayoutArgs {
                    kind: r.kind,
                    kind_name: Some(kind_name),
                    struct_name: Some(struct_name),
                    size: r.size,
                    fields: Some(fields),
                },
            ));
        }
        b.create_vector(&recs)
    }

    /// Reads a table back from flatbuffers. Unknown field types or roles (from a newer writer) read as
    /// `Bytes`/`Plain`, which keeps the codec lossless and the converter away from fields it cannot interpret.
    pub fn from_fb(
        cupti_api_version: u32,
        v: flatbuffers::Vector<'_, flatbuffers::ForwardsUOffset<fb::RecordLayout<'_>>>,
    ) -> Result<Self, LayoutError> {
        let mut records = Vec::with_capacity(v.len());
        for r in v.iter() {
            let fields = r
                .fields()
                .map(|fs| {
                    fs.iter()
                        .map(|f| FieldLayout {
                            name: Cow::Owned(f.name().unwrap_or("").to_string()),
                            offset: f.offset(),
                            size: f.size(),
                            ty: FieldType::from_fb(f.type_()),
                            role: FieldRole::from_fb(f.role()),
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            records.push(RecordLayout {
                kind: r.kind(),
                kind_name: Cow::Owned(r.kind_name().unwrap_or("").to_string()),
                struct_name: Cow::Owned(r.struct_name().unwrap_or("").to_string()),
                size: r.size(),
                fields: Cow::Owned(fields),
            });
        }
        LayoutTable::new(cupti_api_version, records)
    }
}

impl FieldType {
    fn to_fb(self) -> fb::FieldType {
        match self {
            FieldType::U8 => fb::FieldType::U8,
            FieldType::U16 => fb::FieldType::U16,
            FieldType::U32 => fb::FieldType::U32,
            FieldType::U64 => fb::FieldType::U64,
            FieldType::I32 => fb::FieldType::I32,
            FieldType::I64 => fb::FieldType::I64,
            FieldType::F64 => fb::FieldType::F64,
            FieldType::Ptr => fb::FieldType::Ptr,
            FieldType::Bytes => fb::FieldType::Bytes,
        }
    }

    fn from_fb(t: fb::FieldType) -> Self {
        match t {
            fb::FieldType::U8 => FieldType::U8,
            fb::FieldType::U16 => FieldType::U16,
            fb::FieldType::U32 => FieldType::U32,
            fb::FieldType::U64 => FieldType::U64,
            fb::FieldType::I32 => FieldType::I32,
            fb::FieldType::I64 => FieldType::I64,
            fb::FieldType::F64 => FieldType::F64,
            fb::FieldType::Ptr => FieldType::Ptr,
            _ => FieldType::Bytes,
        }
    }
}

impl FieldRole {
    fn to_fb(self) -> fb::FieldRole {
        match self {
            FieldRole::Plain => fb::FieldRole::Plain,
            FieldRole::Kind => fb::FieldRole::Kind,
            FieldRole::Time => fb::FieldRole::Time,
            FieldRole::End => fb::FieldRole::End,
            FieldRole::Sequential => fb::FieldRole::Sequential,
            FieldRole::StringPtr => fb::FieldRole::StringPtr,
            FieldRole::BlobPtr => fb::FieldRole::BlobPtr,
            FieldRole::OpaquePtr => fb::FieldRole::OpaquePtr,
        }
    }

    fn from_fb(r: fb::FieldRole) -> Self {
        match r {
            fb::FieldRole::Kind => FieldRole::Kind,
            fb::FieldRole::Time => FieldRole::Time,
            fb::FieldRole::End => FieldRole::End,
            fb::FieldRole::Sequential => FieldRole::Sequential,
            fb::FieldRole::StringPtr => FieldRole::StringPtr,
            fb::FieldRole::BlobPtr => FieldRole::BlobPtr,
            fb::FieldRole::OpaquePtr => FieldRole::OpaquePtr,
            _ => FieldRole::Plain,
        }
    }
}

/// CUPTI API versions that have a built-in layout table, with their CUDA release.
pub const SUPPORTED: &[(u32, &str)] = &[(130001, "13.0"), (28, "12.9")];

/// The built-in layout table of a CUPTI API version (`cuptiGetVersion`), if we have one.
pub fn builtin(cupti_api_version: u32) -> Option<LayoutTable> {
    let records = match cupti_api_version {
        130001 => cupti_130001::RECORDS,
        28 => cupti_28::RECORDS,
        _ => return None,
    };
    Some(LayoutTable::new(cupti_api_version, records.to_vec()).expect("built-in layout tables are valid"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds;

    #[test]
    fn builtin_tables_have_the_sizes_cupti_writes() {
        let t13 = builtin(130001).unwrap();
        let t12 = builtin(28).unwrap();
        assert_eq!(t13.size_of(kinds::CONCURRENT_KERNEL), Some(216));
        assert_eq!(t13.get(kinds::CONCURRENT_KERNEL).unwrap().struct_name, "CUpti_ActivityKernel10");
        assert_eq!(t12.size_of(kinds::CONCURRENT_KERNEL), Some(208));
        assert_eq!(t12.get(kinds::CONCURRENT_KERNEL).unwrap().struct_name, "CUpti_ActivityKernel9");
        for t in [&t13, &t12] {
            assert_eq!(t.size_of(kinds::RUNTIME), Some(40));
            assert_eq!(t.size_of(kinds::EXTERNAL_CORRELATION), Some(24));
            assert_eq!(t.size_of(kinds::MEMCPY), Some(96));
            // CUpti_ActivityUnifiedMemoryCounter3 in both; its `end` is no end for every counter kind.
            assert_eq!(t.size_of(kinds::UNIFIED_MEMORY_COUNTER), Some(104));
            let um = t.get(kinds::UNIFIED_MEMORY_COUNTER).unwrap();
            assert_eq!(um.field("end").unwrap().role, FieldRole::Plain);
        }
        assert_eq!((t13.records().len(), t12.records().len()), (28, 29));
        assert_eq!(t13.size_of(kinds::SOURCE_LOCATOR), None);
        assert_eq!(t12.size_of(kinds::SOURCE_LOCATOR), Some(24));
        assert_eq!(t13.size_of(kinds::MARKER_DATA), Some(40));
        assert_eq!(t12.size_of(kinds::MARKER_DATA), Some(32));
        assert!(builtin(27).is_none());
    }

    #[test]
    fn every_builtin_record_starts_with_its_kind() {
        for (api, _) in SUPPORTED {
            for r in builtin(*api).unwrap().records() {
                let f = &r.fields[0];
                assert_eq!(
                    (f.name.as_ref(), f.offset, f.size, f.role),
                    ("kind", 0, 4, FieldRole::Kind),
                    "{}",
                    r.struct_name
                );
                assert!(r.fields.iter().filter(|f| f.role == FieldRole::End).count() <= 1);
                if r.field("end").is_some() {
                    assert!(r.field("start").is_some(), "{} has end without start", r.struct_name);
                }
            }
        }
    }

    #[test]
    fn flatbuffers_round_trip_keeps_every_field() {
        let t = builtin(130001).unwrap();
        let mut b = flatbuffers::FlatBufferBuilder::new();
        let v = t.to_fb(&mut b);
        let meta =
            fb::SessionMetadata::create(&mut b, &fb::SessionMetadataArgs { layouts: Some(v), ..Default::default() });
        b.finish(meta, None);
        let m = flatbuffers::root::<fb::SessionMetadata>(b.finished_data()).unwrap();
        let back = LayoutTable::from_fb(130001, m.layouts().unwrap()).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn invalid_tables_are_rejected() {
        let mut r = builtin(130001).unwrap().get(kinds::RUNTIME).unwrap().clone();
        r.size = 36;
        assert_eq!(LayoutTable::new(1, vec![r.clone()]), Err(LayoutError::BadSize { kind: 5, size: 36 }));
        r.size = 32;
        assert!(matches!(LayoutTable::new(1, vec![r.clone()]), Err(LayoutError::FieldOutOfBounds { kind: 5, .. })));
        r.size = 40;
        assert_eq!(LayoutTable::new(1, vec![r.clone(), r]), Err(LayoutError::DuplicateKind(5)));
    }
}
