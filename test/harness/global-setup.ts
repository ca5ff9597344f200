// Placeholder: the swtpm harness provisions its per-run state here (owned by native/harness work).
export default async function setup(): Promise<void> {}
