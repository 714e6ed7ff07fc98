"""snap.py DIR OUT.json: every file under DIR (relative path -> sha256)."""
import hashlib, json, sys
from pathlib import Path
root = Path(sys.argv[1])
json.dump({str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
           for p in sorted(root.rglob("*")) if p.is_file()}, open(sys.argv[2], "w"), indent=0)
