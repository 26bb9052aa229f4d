// postinstall: put the native binary in place of bin/rewindfs.js, so that `rewindfs` (which npm
// links to that file) starts without Node — hooks run it several times per tool call. As esbuild
// does. If anything is missing (no binary for this platform, optional dependencies left out) the
// JavaScript launcher stays, and says what is wrong when run; with --ignore-scripts it stays too.
// Only in an installed package (under node_modules), never in the repository's sdk/typescript.
import { chmodSync, copyFileSync, linkSync, renameSync, rmSync } from "node:fs";
import { sep } from "node:path";
import { fileURLToPath } from "node:url";
import { binaryPath } from "./binary.js";

const launcher = fileURLToPath(new URL("./bin/rewindfs.js", import.meta.url));
if (!launcher.includes(`${sep}node_modules${sep}`)) process.exit(0);
try {
  const binary = binaryPath();
  const tmp = `${launcher}.${process.pid}.tmp`;
  try {
    linkSync(binary, tmp);
  } catch {
    copyFileSync(binary, tmp);
  }
  chmodSync(tmp, 0o755);
  renameSync(tmp, launcher);
} catch {
  rmSync(`${launcher}.${process.pid}.tmp`, { force: true });
}
