//! Launch health over a stream (the loaded path: [`super::super::launch`]).
