"""edgesmith.targets"""
