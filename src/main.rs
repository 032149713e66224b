fn main() {
    std::process::exit(partita::cli::main());
}
