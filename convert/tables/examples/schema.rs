//! Prints every table's columns and Arrow types (the skeleton of docs/TABLES.md):
//! `cargo run -p cutr-tables --example schema -- fixtures/cuda_workload.cutr`.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: schema FILE.cutr")?;
    let t = cutr_model::load(&[path.into()], &Default::default())?;
    for (table, cols) in cutr_tables::schemas(&t) {
        println!("### `{table}`\n\n| column | type |\n|---|---|");
        for (name, ty) in cols {
            println!("| `{name}` | `{ty}` |");
        }
        println!();
    }
    Ok(())
}
