/**
 * The values the CLI's options take: each kind's label and the parsers of the
 * CLI's own options, whose `UsageError` names the flag, its variable and what
 * to write instead. The drain settings' parsers stay in settings.ts, which the
 * worker loads too.
 */
import {formatDuration} from './duration.js';
import {UsageError} from './errors.js';
import {LOG_LEVELS} from './logger.js';
import {LOG_FORMATS, type LogFormat} from './primary/log-format.js';
import type {MetricsAddress} from './primary/options.js';
import {envName, parseDurationSetting} from './settings.js';
import {HEARTBEAT_INTERVAL_MS} from './protocol.js';

/** What an option's value is: the label `--help` shows, and how errors name it. */
export const VALUE_KINDS = {
	number: 'a whole number',
	duration: 'a duration (500ms, 20s, 2m or a number of seconds)',
	seconds: 'a whole number of seconds',
	path: 'a request path',
	level: `a log level (${LOG_LEVELS.join(', ')})`,
	address: 'a port, or host:port (9091, 127.0.0.1:9091, [::1]:9091)',
	format: 'a log format (json, pretty)',
	size: 'a size (300M, 1G, 512K or a number of bytes)',
	switch: 'on or off',
} as const;

export type ValueKind = keyof typeof VALUE_KINDS;

/** `--metrics`: `9091` (every interface), `127.0.0.1:9091`, `[::1]:9091`, `localhost:9091`. */
export function parseMetricsAddress(text: string): MetricsAddress {
	const match = /^(?:(?:\[([0-9a-fA-F:.]+)\]|([\w.-]+)):)?(\d{1,5})$/.exec(text.trim());
	const port = match ? Number(match[3]) : Number.NaN;
	if (!match || port < 1 || port > 65_535) {
		throw new UsageError(`--metrics (GRACEFUL_CLUSTER_METRICS): "${text}" is not ${VALUE_KINDS.address}, with a port from 1 to 65535. Write --metrics 9091, or --metrics 127.0.0.1:9091 to keep it local.`);
	}

	return {host: match[1] ?? match[2], port};
}

export function parsePositiveInt(flag: string, text: string, max: number): number {
	if (!/^\d+$/.test(text.trim()) || Number(text) < 1 || Number(text) > max) {
		throw new UsageError(`--${flag} (${envName(flag)}): "${text}" is not a whole number from 1 to ${max}.`);
	}

	return Number(text);
}

export function parseWholeNumber(flag: string, text: string): number {
	if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(Number(text))) {
		throw new UsageError(`--${flag} (${envName(flag)}): "${text}" is not a whole number. Write it as 0 (off), 1000 or 10000.`);
	}

	return Number(text);
}

const SIZE_UNITS: Readonly<Record<string, number>> = {'': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3};
const MIN_MEMORY_LIMIT = 32 * 1024 ** 2;

/** `300M`, `1G`, `512K` (binary units, as pm2 reads them), or bytes. */
export function parseSize(flag: string, text: string): number {
	const match = /^(\d+(?:\.\d+)?)\s*([kmg]?)b?$/i.exec(text.trim());
	const bytes = match ? Math.round(Number(match[1]) * SIZE_UNITS[match[2]!.toLowerCase()]!) : Number.NaN;
	if (!Number.isSafeInteger(bytes)) {
		throw new UsageError(`--${flag} (${envName(flag)}): "${text}" is not a size. Write it as 300M, 1G, 512K or a number of bytes (0 = off).`);
	}

	// A Node.js process at rest is larger than this: every worker would be
	// replaced every few seconds, forever.
	if (bytes > 0 && bytes < MIN_MEMORY_LIMIT) {
		throw new UsageError(`--${flag} (${envName(flag)}): "${text}" is below 32M, less than a Node.js worker uses at rest, so every worker would be replaced over and over. Write a limit such as 300M or 1G (0 = off).`);
	}

	return bytes;
}

export function parseSwitch(flag: string, text: string): boolean {
	const value = text.trim().toLowerCase();
	if (value !== 'on' && value !== 'off') {
		throw new UsageError(`--${flag} (${envName(flag)}): "${text}" is neither on nor off.`);
	}

	return value === 'on';
}

/** Three heartbeats: one or two would kill healthy workers whose beat came a little late (a GC pause; puma#1714). */
export const MIN_WORKER_TIMEOUT_MS = 3 * HEARTBEAT_INTERVAL_MS;

export function parseWorkerTimeout(flag: string, text: string): number {
	const ms = parseDurationSetting(flag, text);
	if (ms !== 0 && ms < MIN_WORKER_TIMEOUT_MS) {
		const least = formatDuration(MIN_WORKER_TIMEOUT_MS);
		throw new UsageError(`--${flag} (${envName(flag)}): "${text}" is shorter than ${least}; workers send a heartbeat every ${formatDuration(HEARTBEAT_INTERVAL_MS)}, so a healthy worker would be killed. Use ${least} or more, or 0 to turn it off.`);
	}

	return ms;
}

export function parseLogLevel(flag: string, text: string): string {
	if (!(LOG_LEVELS as readonly string[]).includes(text)) {
		throw new UsageError(`--${flag} (${envName(flag)}): "${text}" is not a level. Use one of ${LOG_LEVELS.join(', ')}.`);
	}

	return text;
}

export function parseLogFormat(flag: string, text: string): LogFormat {
	if (!(LOG_FORMATS as readonly string[]).includes(text)) {
		throw new UsageError(`--${flag} (${envName(flag)}): "${text}" is not a format. Use json or pretty (left out: json, or pretty when stdout is a terminal).`);
	}

	return text as LogFormat;
}
