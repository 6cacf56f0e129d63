import sys
from pathlib import Path

# tests import their shared builders as `helpers`
sys.path.insert(0, str(Path(__file__).parent))
