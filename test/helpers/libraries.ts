// What the tests of apps as their authors wrote them share
// (test/e2e/libraries.test.ts, unchanged-apps.test.ts): one small app per library
// in test/fixtures/libraries/, started under the real CLI.
import type {ExecutionContext} from 'ava';
import {fixture, start, type LogLine, type Proc} from './cluster.js';

export const WORKERS = 2;
export const app = (name: string): string => fixture(`libraries/${name}.mjs`);
export const cleanupDone = (proc: Proc): LogLine[] => proc.lines.filter(line => line.msg === 'fixture cleanup' && line['step'] === 'done');
export const drainFinished = (proc: Proc): LogLine | undefined => proc.lines.find(line => line.role === 'primary' && line.msg === 'drain finished');

/** Starts the CLI on a library app; resolves with the app's port once every worker listens. */
export async function startApp(t: ExecutionContext, name: string, {workers = WORKERS, options = [], env, rejectPeriod = '1500ms'}: {workers?: number; options?: string[]; env?: Record<string, string>; rejectPeriod?: string} = {}): Promise<Proc & {port: number}> {
	const proc = start(t, ['--workers', String(workers), '--reject-period', rejectPeriod, '--grace-period', '20s', ...options, app(name)], {env});
	const line = await proc.waitForLog('fixture listening', {count: workers, timeout: 30_000});
	return Object.assign(proc, {port: Number(line['port'])});
}
