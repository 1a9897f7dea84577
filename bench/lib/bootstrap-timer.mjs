// Preloaded into each worker of start-phases.js's hand-written primary: imports
// $PHASE_BOOTSTRAP (a build's worker bootstrap) and then $PHASE_HELPER (its
// attach() helper), appends how long each import took to $PHASE_LOG, and exits:
// one worker at a time, so that nothing else runs on the machine meanwhile.
import {appendFileSync} from 'node:fs';
import process from 'node:process';

const started = performance.now();
await import(process.env.PHASE_BOOTSTRAP);
const booted = performance.now();
await import(process.env.PHASE_HELPER);
appendFileSync(process.env.PHASE_LOG, `${(booted - started).toFixed(2)} ${(performance.now() - booted).toFixed(2)}\n`);
process.exit(0);
