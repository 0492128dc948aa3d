"""Write the JSON Schema of the voicefleet config file, as the config models generate it:
``python scripts/config_schema.py docs/config.schema.json`` (``make config-schema``). Editors check and complete YAML
with it (docs/configuration.md#editor-support); tests/common/test_config.py fails when the committed file is stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from services.common.config import config_schema


def main(out: str) -> None:
    Path(out).write_text(json.dumps(config_schema(), indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
