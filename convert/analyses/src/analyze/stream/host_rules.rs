//! The host-side rules over a stream (the loaded path: [`super::super::findings::host`]).
