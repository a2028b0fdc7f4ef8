//! The per-kernel rules over a stream (the loaded path: [`super::super::findings::kernels`]).
