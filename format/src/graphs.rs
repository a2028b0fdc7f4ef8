//! Graph structure and where each node was made (`graphs` chunks, format 1.5): what CUPTI's graph resource
//! callbacks reported, with the native call stack of each node's creating call, so converters can tie a replayed
//! graph's kernels to the NVTX ranges, API call and stack of the moment their node was captured.

use cutr_schema::fb;
use flatbuffers::FlatBufferBuilder;

use crate::error::ChunkError;

/// What a [`GraphEvent`] records (`GraphEvent.kind` in `cutr.fbs`, which says what each field means per kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GraphEventKind {
    GraphCreated,
    GraphCloned,
    NodeCreated,
    DependencyCreated,
    NodeCloned,
    ExecCreated,
    ExecNodeUpdated,
    ExecNodeParamsSet,
    /// A kind from a newer writer: kept, ignored by joins.
    Unknown(u8),
}

impl GraphEventKind {
    pub fn from_u8(v: u8) -> GraphEventKind {
        use GraphEventKind::*;
        match v {
            1 => GraphCreated,
            2 => GraphCloned,
            3 => NodeCreated,
            4 => DependencyCreated,
            5 => NodeCloned,
            6 => ExecCreated,
            7 => ExecNodeUpdated,
            8 => ExecNodeParamsSet,
            other => Unknown(other),
        }
    }

    pub fn to_u8(self) -> u8 {
        use GraphEventKind::*;
        match self {
            GraphCreated => 1,
            GraphCloned => 2,
            NodeCreated => 3,
            DependencyCreated => 4,
            NodeCloned => 5,
            ExecCreated => 6,
            ExecNodeUpdated => 7,
            ExecNodeParamsSet => 8,
            Unknown(v) => v,
        }
    }
}

/// One graph callback, as the recorder kept it. Fields a kind does not use are 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphEvent {
    pub kind: GraphEventKind,
    /// CUPTI timestamp of the callback (ns).
    pub timestamp: u64,
    /// The OS thread id of the calling thread.
    pub thread_id: u32,
    pub graph: u32,
    pub other_graph: u32,
    pub exec: u32,
    pub node: u64,
    pub other_node: u64,
    /// `CUgraphNodeType` of a created node.
    pub node_type: u8,
    /// Where this event's call stack lies in [`GraphEvents::frames`] (`start..start + len`; `len` 0 = none).
    pub stack_start: u32,
    pub stack_len: u16,
}

impl GraphEvent {
    /// An event of `kind` with every other field 0.
    pub fn new(kind: GraphEventKind, timestamp: u64, thread_id: u32) -> GraphEvent {
        GraphEvent {
            kind,
            timestamp,
            thread_id,
            graph: 0,
            other_graph: 0,
            exec: 0,
            node: 0,
            other_node: 0,
            node_type: 0,
            stack_start: 0,
            stack_len: 0,
        }
    }
}

/// One chunk: events in the order the callbacks came, and the frames of their stacks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphEvents {
    pub events: Vec<GraphEvent>,
    /// Return addresses, innermost first per stack.
    pub frames: Vec<u64>,
    /// Callbacks the recorder could not keep.
    pub lost_events: u64,
}

impl GraphEvents {
    /// The call stack of an event (innermost first); empty when none was kept.
    pub fn stack(&self, e: &GraphEvent) -> &[u64] {
        let start = e.stack_start as usize;
        self.frames.get(start..start + e.stack_len as usize).unwrap_or(&[])
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = FlatBufferBuilder::with_capacity(64 + self.events.len() * 48 + self.frames.len() * 8);
        let events: Vec<fb::GraphEvent> = self
            .events
            .iter()
            .map(|e| {
                fb::GraphEvent::new(
                    e.timestamp,
                    e.node,
                    e.other_node,
                    e.thread_id,
                    e.graph,
                    e.other_graph,
                    e.exec,
                    e.stack_start,
                    e.stack_len,
                    e.kind.to_u8(),
                    e.node_type,
                )
            })
            .collect();
        let events = b.create_vector(&events);
        let frames = b.create_vector(&self.frames);
        let root = fb::GraphEvents::create(
            &mut b,
            &fb::GraphEventsArgs { events: Some(events), frames: Some(frames), lost_events: self.lost_events },
        );
        b.finish(root, None);
        b.finished_data().to_vec()
    }

    /// Reads a chunk; every stack must lie inside the chunk's frames.
    pub fn from_bytes(bytes: &[u8]) -> Result<GraphEvents, ChunkError> {
        let g = flatbuffers::root::<fb::GraphEvents>(bytes)
            .map_err(|e| ChunkError::Malformed(format!("graph events: {e}")))?;
        let frames: Vec<u64> = g.frames().map(|v| v.iter().collect()).unwrap_or_default();
        let mut events = Vec::new();
        for (i, e) in g.events().into_iter().flatten().enumerate() {
            let end = u64::from(e.stack_start()) + u64::from(e.stack_len());
            if end > frames.len() as u64 {
                return Err(ChunkError::Malformed(format!(
                    "graph events: event {i}'s stack ends at frame {end} of {}",
                    frames.len()
                )));
            }
            events.push(GraphEvent {
                kind: GraphEventKind::from_u8(e.kind()),
                timestamp: e.timestamp(),
                thread_id: e.thread_id(),
                graph: e.graph(),
                other_graph: e.other_graph(),
                exec: e.exec(),
                node: e.node(),
                other_node: e.other_node(),
                node_type: e.node_type(),
                stack_start: e.stack_start(),
                stack_len: e.stack_len(),
            });
        }
        Ok(GraphEvents { events, frames, lost_events: g.lost_events() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> GraphEvents {
        let mut created = GraphEvent::new(GraphEventKind::NodeCreated, 1_000, 77);
        (created.graph, created.node, created.node_type, created.stack_start, created.stack_len) =
            (6, 6 << 32, 0, 1, 2);
        let mut cloned = GraphEvent::new(GraphEventKind::NodeCloned, 2_000, 77);
        (cloned.graph, cloned.node, cloned.other_graph, cloned.other_node) = (7, 7 << 32, 6, 6 << 32);
        GraphEvents {
            events: vec![GraphEvent::new(GraphEventKind::Unknown(200), 5, 1), created, cloned],
            frames: vec![0xdead, 0x401000, 0x402000],
            lost_events: 3,
        }
    }

    #[test]
    fn a_chunk_round_trips_with_its_stacks() {
        let g = sample();
        let back = GraphEvents::from_bytes(&g.to_bytes()).unwrap();
        assert_eq!(back, g);
        assert_eq!(back.stack(&back.events[1]), &[0x401000, 0x402000]);
        assert_eq!(back.stack(&back.events[2]), &[] as &[u64]);
        assert_eq!(back.events[0].kind.to_u8(), 200);
    }

    #[test]
    fn a_stack_past_the_frames_is_damage() {
        let mut g = sample();
        g.events[1].stack_len = 3;
        assert_eq!(
            GraphEvents::from_bytes(&g.to_bytes()).unwrap_err().to_string(),
            ChunkError::Malformed("graph events: event 1's stack ends at frame 4 of 3".into()).to_string()
        );
    }
}
