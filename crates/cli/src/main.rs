//! `awsmp`: the operator CLI (entry point only).

fn main() {
    eprintln!("awsmp: commands are being assembled; see README.md");
    std::process::exit(2);
}
