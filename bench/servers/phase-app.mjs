// The app of start-phases.js's workers: appends to $PHASE_LOG how long the
// worker took to reach its first line (ms from the process's time origin: Node's
// own start plus whatever was preloaded), then how long importing $PHASE_HELPER
// (a build's attach() helper) took, if given; then exits. One worker at a time,
// so that nothing else runs on the machine meanwhile.
import {appendFileSync} from 'node:fs';
import process from 'node:process';

const firstLine = performance.now();
let helper = 0;
if (process.env.PHASE_HELPER) {
	const started = performance.now();
	await import(process.env.PHASE_HELPER);
	helper = performance.now() - started;
}

appendFileSync(process.env.PHASE_LOG, `${firstLine.toFixed(2)} ${helper.toFixed(2)}\n`);
process.exit(0);
